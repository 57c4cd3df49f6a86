"""Array arguments: bad arrays raise EmcError, the DLPack path on CPU producers, device_count,
and the CUDA backend's plumbing (pointers, streams) against a library proxy."""
import ctypes
import os
import unittest

import numpy as np

from py_common import emc, LIB, inline_cache


class T04BadArrays(unittest.TestCase):
    def setUp(self):
        emc.load(LIB)
        self.store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        self.cache = inline_cache(self.store, backend="host", capacity_bytes=1 << 16)
        self.ids = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
        self.offsets = np.array([0, 3, 5], dtype=np.uint64)

    def tearDown(self):
        self.cache.close()
        self.store.close()

    def raises(self, fn, *needles, status=emc.EMC_EINVAL):
        with self.assertRaises(emc.EmcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.status, status, str(e))
        self.assertTrue(e.detail, "empty detail")
        for n in needles:
            self.assertIn(n, e.detail)
        return e

    def test_ids(self):
        c, o = self.cache, self.offsets
        self.raises(lambda: c.lookup(self.ids.astype(np.int32), o), "dtype int32", "uint64")
        self.raises(lambda: c.lookup(self.ids.astype(np.float64), o), "dtype float64")
        np.testing.assert_array_equal(c.lookup(self.ids.astype(np.int64), o), c.lookup(self.ids, o))
        self.raises(lambda: c.lookup(self.ids.reshape(5, 1), o), "shape (5, 1)")
        wide = np.arange(10, dtype=np.uint64)
        self.raises(lambda: c.lookup(wide[::2], o), "not C-contiguous")
        self.raises(lambda: c.lookup(self.ids[:4], o), "4 elements", "offsets[-1] = 5")
        self.raises(lambda: c.lookup([1, 2, 3, 4, 5], o), "expected a NumPy array")

    def test_offsets(self):
        c = self.cache
        self.raises(lambda: c.lookup(self.ids, self.offsets[:2]), "2 entries", "n_tables + 1 = 3")
        self.raises(lambda: c.lookup(self.ids, np.array([0, 1, 2, 5])), "4 entries")
        self.raises(lambda: c.lookup(self.ids, np.array([[0, 3, 5]])), "1-D integer")
        self.raises(lambda: c.lookup(self.ids, np.array([0.0, 3.0, 5.0])), "1-D integer")
        # contents are the library's to check: its detail comes back verbatim
        e = self.raises(lambda: c.lookup(self.ids, np.array([0, 6, 5], dtype=np.uint64)))
        self.assertEqual(e.detail, emc.library().emc_last_error_detail().decode())
        # .func names the user's call, not the helper that found it (emc_batch_bytes)
        self.assertEqual(e.func, "emc_lookup")
        bad = np.array([0, 6, 5], dtype=np.uint64)
        out = np.empty((5, 4), np.float32)
        for fn, func in ((lambda: c.lookup(self.ids, bad, where=True), "emc_lookup_ex"),
                         (lambda: c.lookup(self.ids, bad, out=out), "emc_lookup"),
                         (lambda: c.insert(self.ids, bad, out), "emc_insert"),
                         (lambda: c.split(out, bad), "split"),
                         (lambda: c.batch_bytes(bad), "emc_batch_bytes")):
            self.assertEqual(self.raises(fn).func, func)

    def test_out_and_rows(self):
        c, i, o = self.cache, self.ids, self.offsets
        self.raises(lambda: c.lookup(i, o, out=np.empty((5, 4), dtype=np.float64)), "float64 (5, 4)",
                    "float32 (5, 4)")
        self.raises(lambda: c.lookup(i, o, out=np.empty((4, 5), dtype=np.float32)), "(4, 5)")
        big = np.empty((5, 8), dtype=np.float32)
        self.raises(lambda: c.lookup(i, o, out=big[:, :4]), "not C-contiguous")
        ro = np.empty((5, 4), dtype=np.float32)
        ro.flags.writeable = False
        self.raises(lambda: c.lookup(i, o, out=ro), "read-only")
        c.insert(i, o, ro)  # insert only reads its rows: a read-only array is fine
        self.raises(lambda: c.insert(i, o, np.zeros((5, 3), dtype=np.float32)), "(5, 3)")
        self.raises(lambda: c.lookup(i, o, where=np.empty(4, dtype=np.uint8)), "where")

    def test_library_range_error(self):
        ids = np.array([1, 2, 100, 4, 5], dtype=np.uint64)  # table "a" has 100 rows
        e = self.raises(lambda: self.cache.lookup(ids, self.offsets), status=emc.EMC_ERANGE)
        self.assertEqual(e.name, "EMC_ERANGE")
        self.assertEqual(e.detail, emc.library().emc_last_error_detail().decode())
        self.assertIn("100", e.detail)

    def test_device_arrays_refused_by_host_backend(self):
        host = self.ids.copy()

        class FakeCuda:  # the interface's shape only; the pointer is never dereferenced
            __cuda_array_interface__ = {"shape": (5,), "typestr": "<u8", "strides": None,
                                        "data": (host.ctypes.data, False), "version": 3,
                                        "stream": 1}
        self.raises(lambda: self.cache.lookup(FakeCuda(), self.offsets), "device memory",
                    "host backend")

        class FakeCudaStrided:
            __cuda_array_interface__ = {"shape": (5,), "typestr": "<u8", "strides": (16,),
                                        "data": (host.ctypes.data, False), "version": 3}
        self.raises(lambda: self.cache.lookup(FakeCudaStrided(), self.offsets), "not C-contiguous")
        self.raises(lambda: self.cache.lookup(self.ids, self.offsets, stream=5), "stream")


class DLPackOnly:
    """Exposes an ndarray through DLPack alone (as a PyTorch CPU tensor would)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class T05DLPack(unittest.TestCase):
    @unittest.skipUnless(hasattr(np.ndarray, "__dlpack__"), "NumPy without DLPack (< 1.22)")
    def test_cpu_dlpack_in_and_out(self):
        emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        store.fill_uniform(0, -1, 1, 3)
        store.fill_uniform(1, -1, 1, 4)
        with inline_cache(store, backend="host", capacity_bytes=1 << 16) as cache:
            ids = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
            offsets = np.array([0, 3, 5], dtype=np.uint64)
            out = np.zeros((5, 4), dtype=np.float32)
            cache.lookup(DLPackOnly(ids), offsets, out=DLPackOnly(out))
            np.testing.assert_array_equal(out[:3], store.read(0, ids[:3]))
            np.testing.assert_array_equal(out[3:], store.read(1, ids[3:]))
            with self.assertRaises(emc.EmcError) as cm:
                cache.lookup(DLPackOnly(ids.astype(np.int32)), offsets)
            self.assertIn("dtype int32", cm.exception.detail)
            with self.assertRaises(emc.EmcError) as cm:
                cache.lookup(DLPackOnly(np.arange(10, dtype=np.uint64)[::2]), offsets)
            self.assertIn("not C-contiguous", cm.exception.detail)
            # out allocated beside CPU DLPack ids (it was refused: "cannot allocate beside")
            got = cache.lookup(DLPackOnly(ids), offsets)
            np.testing.assert_array_equal(np.asarray(got), out)
            # a producer that refuses to export (NumPy, for a read-only array): EmcError, not
            # a BufferError
            ro = ids.copy()
            ro.flags.writeable = False
            try:
                ro.__dlpack__()
                refuses = False
            except BufferError:
                refuses = True
            if refuses:
                with self.assertRaises(emc.EmcError) as cm:
                    cache.lookup(DLPackOnly(ro), offsets)
                self.assertIn("refused to export", cm.exception.detail)
            # split of a DLPack row buffer: views of its memory (it raised TypeError, and a
            # producer whose __array__ copies got views of the copy: writes were lost)
            buf = np.zeros((5, 4), dtype=np.float32)

            class CopyingDL(DLPackOnly):
                def __array__(self, dtype=None, copy=None):
                    return self.a.copy()

            for wrap in (DLPackOnly, CopyingDL):
                buf[:] = 0
                views = cache.split(wrap(buf), offsets)
                views[0][:] = 1
                views[1][:] = 2
                self.assertEqual(float(buf.sum()), 3 * 4 * 1 + 2 * 4 * 2, wrap.__name__)
        store.close()


class T06Devices(unittest.TestCase):
    def test_device_count_or_why_not(self):
        emc.load(LIB)
        try:
            n = emc.device_count()
        except emc.EmcError as e:
            self.assertIn(e.name, ("EMC_ENODEV", "EMC_EUNSUPPORTED"), str(e))
            self.assertTrue(e.detail)
            no_driver = not os.path.exists("/proc/driver/nvidia")
            try:
                ctypes.CDLL("libcuda.so.1")
                no_driver = False
            except OSError:
                pass
            if e.name == "EMC_ENODEV" and no_driver:
                self.assertIn("no NVIDIA driver found", e.detail)
            return
        self.assertGreaterEqual(n, 1)


class T07CudaPlumbing(unittest.TestCase):
    """The CUDA backend's argument plumbing without a GPU: a Cache that claims the CUDA
    backend, and a library proxy that records emc_lookup / emc_insert instead of calling them.
    Checks which pointers and which stream a call would get, and which stream DLPack producers
    are asked for. (No device memory is touched; the real device path is not run here.)"""

    class Proxy:
        def __init__(self, real):
            self.real, self.calls = real, []

        def __getattr__(self, name):
            return getattr(self.real, name)

        def emc_lookup(self, *args):
            self.calls.append(("lookup",) + args)
            return 0

        def emc_insert(self, *args):
            self.calls.append(("insert",) + args)
            return 0

    class Cai:
        def __init__(self, a, stream=None):
            self.a = a
            self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                             "strides": None, "data": (a.ctypes.data, False),
                                             "version": 3, "stream": stream}

    class DLDevice:
        def __init__(self, a):
            self.a, self.asked = a, []

        def __dlpack__(self, stream=None):
            self.asked.append(stream)
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    @unittest.skipUnless(hasattr(np.ndarray, "__dlpack__"), "NumPy without DLPack (< 1.22)")
    def test_streams_and_pointers(self):
        real = emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        cache = inline_cache(store, backend="host", capacity_bytes=1 << 16)
        proxy = self.Proxy(real)
        cls = type("FakeCudaCache", (emc.Cache,), {"backend": "cuda"})
        cache.__class__ = cls
        emc._capi._lib = proxy
        try:
            ids = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
            offsets = [0, 3, 5]
            out = np.empty((5, 4), dtype=np.float32)
            cache.lookup(self.Cai(ids, stream=7), offsets, out=self.Cai(out))
            _, _, p_ids, _, p_out, st = proxy.calls[-1]
            self.assertEqual((p_ids, p_out, st), (ids.ctypes.data, out.ctypes.data, 7))

            class TorchLikeStream:
                cuda_stream = 9
            cache.lookup(self.Cai(ids, stream=7), offsets, out=out, stream=TorchLikeStream())
            self.assertEqual(proxy.calls[-1][-1], 9)  # the caller's stream wins

            d_ids, d_out = self.DLDevice(ids), self.DLDevice(out)
            cache.lookup(d_ids, offsets, out=d_out)  # no stream anywhere: the default
            self.assertIsNone(proxy.calls[-1][-1])
            self.assertEqual((d_ids.asked, d_out.asked), ([1], [1]))  # legacy default stream
            cache.lookup(d_ids, offsets, out=d_out, stream=11)
            self.assertEqual((proxy.calls[-1][-1], d_ids.asked[-1], d_out.asked[-1]), (11, 11, 11))
            self.assertEqual(proxy.calls[-1][2], ids.ctypes.data)

            cache.insert(self.Cai(ids, stream=2), offsets, self.DLDevice(out))
            self.assertEqual(proxy.calls[-1][0], "insert")
            self.assertEqual(proxy.calls[-1][-1], 2)  # per-thread default stream, as named
            with self.assertRaises(emc.EmcError) as cm:
                cache.lookup(self.Cai(ids), offsets, out=self.Cai(np.empty((5, 4), np.float64)))
            self.assertIn("float64", cm.exception.detail)

            class RequiresGrad:  # PyTorch raises RuntimeError, not AttributeError, here
                @property
                def __cuda_array_interface__(self):
                    raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                                       "requires grad")
            with self.assertRaises(emc.EmcError) as cm:
                cache.insert(self.Cai(ids), offsets, RequiresGrad())
            self.assertIn("detach()", cm.exception.detail)
        finally:
            emc._capi._lib = real
            cache.__class__ = emc.Cache
            cache.close()
            store.close()


# --------------------------------------------------------------------------- training
