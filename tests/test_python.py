#!/usr/bin/env python3
"""The Python binding (python_ctypes_example/embcache.py) against a built libembcache.so.

    python3 tests/test_python.py LIBEMBCACHE_SO [PYTHON_DIR]

CTest runs it under `env -i PATH=/usr/bin:/bin` (no LD_PRELOAD, no GLIBC_TUNABLES, nothing
inherited), so the first test is the plain claim: ctypes.CDLL loads the library in a fresh
process. The rest checks the binding:
  * lookups equal emc_store_read row for row (f32 and f16 tables, dense and hashed, absent
    hashed ids read as zeros), in every accepted row-buffer form, and insert + flush reach the
    store;
  * bad arrays raise EmcError: wrong dtype, shape, non-contiguous, read-only, wrong length
    of offsets (checks made by the binding, status EMC_EINVAL), and errors the library finds
    (decreasing offsets, dense id out of range) carry emc_last_error_detail() verbatim;
  * the DLPack path (the capsule parsed with ctypes, as for CUDA tensors) on CPU producers,
    and that CUDA-array-interface objects are refused by the host backend;
  * device_count() returns the devices or raises saying why ("no NVIDIA driver found" where
    this machine has none);
  * the CUDA backend's plumbing (which pointers and stream a call gets, which stream DLPack
    producers are asked for) against a library proxy that records the calls.
Device arrays on the CUDA backend (CuPy, PyTorch, streams) need a GPU and are not run here.
"""
import ctypes
import os
import sys
import unittest

LIB = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                             "python_ctypes_example"))
del sys.argv[1:]  # unittest must not see them

import numpy as np  # noqa: E402

import embcache as emc  # noqa: E402


class T01FreshProcessLoad(unittest.TestCase):
    def test_ctypes_cdll_loads_directly(self):
        for var in ("LD_PRELOAD", "GLIBC_TUNABLES"):
            self.assertNotIn(var, os.environ, f"{var} is set: the test must run in a fresh env")
        lib = ctypes.CDLL(LIB)  # the claim, verbatim
        lib.emc_host_allocator.restype = ctypes.c_char_p
        alloc = lib.emc_host_allocator().decode()
        self.assertTrue(alloc.startswith(("jemalloc", "system")), alloc)
        print(f"\n  ctypes.CDLL({LIB}): ok; emc_host_allocator(): {alloc}", file=sys.stderr)
        self.assertIs(emc.load(LIB), emc.library())


def make_store():
    store = emc.Store([emc.Table("users", rows=5000, dim=16),
                       emc.Table("items", rows=3000, dim=8, dtype="f16"),
                       emc.Table("tags", rows=2000, dim=16, kind="hashed")])
    rng = np.random.default_rng(5)
    present = np.unique(rng.integers(0, 2**64 - 1, size=1500, dtype=np.uint64, endpoint=True))
    store.write(2, present, np.zeros((present.size, 16), dtype=np.float32))
    for t in range(3):
        store.fill_uniform(t, -1.0, 1.0, seed=100 + t)
    return store, present


def make_batch(rng, present, n=(300, 200, 250)):
    ids = [rng.integers(0, 5000, n[0]), rng.integers(0, 3000, n[1])]
    tags = present[rng.integers(0, present.size, n[2])]
    absent = rng.random(n[2]) < 0.1
    tags[absent] = rng.integers(0, 2**64 - 1, int(absent.sum()), dtype=np.uint64, endpoint=True)
    ids = np.concatenate([a.astype(np.uint64) for a in ids] + [tags])
    offsets = np.array([0, n[0], n[0] + n[1], sum(n)], dtype=np.uint64)
    return ids, offsets


class T02Lookups(unittest.TestCase):
    def setUp(self):
        emc.load(LIB)
        self.store, self.present = make_store()
        self.cache = emc.Cache(self.store, backend="host", capacity_bytes=64 << 10)

    def tearDown(self):
        self.cache.close()
        self.store.close()

    def reference(self, ids, offsets):
        return [self.store.read(t, ids[int(offsets[t]):int(offsets[t + 1])]) for t in range(3)]

    def test_lookups_equal_store_read(self):
        rng = np.random.default_rng(1)
        for _ in range(30):  # a 64 KiB cache: hits, misses and evictions
            ids, offsets = make_batch(rng, self.present)
            out = self.cache.lookup(ids, offsets)
            self.assertEqual(out.dtype, np.uint8)  # mixed dtypes: the byte form
            self.assertEqual(out.nbytes, self.cache.batch_bytes(offsets))
            for got, want in zip(self.cache.split(out, offsets), self.reference(ids, offsets)):
                np.testing.assert_array_equal(got, want)
        st = self.cache.stats()
        self.assertGreater(st["hits"], 0)
        self.assertGreater(st["evictions"], 0)
        self.assertGreater(st["absent"], 0)
        self.assertEqual(st["hits"] + st["misses"] + st["absent"], st["lookups"])

    def test_where_and_out_reuse(self):
        rng = np.random.default_rng(2)
        ids, offsets = make_batch(rng, self.present)
        out = np.empty(self.cache.batch_bytes(offsets), dtype=np.uint8)
        got, where = self.cache.lookup(ids, offsets, out=out, where=True)
        self.assertIs(got, out)
        self.assertEqual(where.shape, ids.shape)
        tag_where = where[int(offsets[2]):]
        tags = ids[int(offsets[2]):]
        np.testing.assert_array_equal(tag_where == emc.WHERE_ABSENT, ~np.isin(tags, self.present))

    def test_insert_then_flush_reaches_store(self):
        rng = np.random.default_rng(3)
        ids, offsets = make_batch(rng, self.present, n=(40, 0, 0))
        ids = np.unique(ids)
        offsets = np.array([0, ids.size, ids.size, ids.size], dtype=np.uint64)
        rows = np.empty(self.cache.batch_bytes(offsets), dtype=np.uint8)
        users = self.cache.split(rows, offsets)[0]
        users[:] = rng.standard_normal(users.shape).astype(np.float32)
        self.cache.insert(ids, offsets, rows)
        np.testing.assert_array_equal(self.cache.split(self.cache.lookup(ids, offsets), offsets)[0],
                                      users)
        self.cache.flush()
        np.testing.assert_array_equal(self.store.read(0, ids), users)


class T03UniformStoreForms(unittest.TestCase):
    """Every table f32, dim 8: (n, 8) float32, 1-D float32 and 1-D uint8 forms all work."""

    def test_forms(self):
        emc.load(LIB)
        store = emc.Store([emc.Table(f"t{i}", rows=1000, dim=8) for i in range(3)])
        for t in range(3):
            store.fill_uniform(t, -1.0, 1.0, seed=t)
        with emc.Cache(store, backend="host", capacity_bytes=1 << 20) as cache:
            ids = np.arange(30, dtype=np.uint64) * 7
            offsets = np.array([0, 10, 20, 30])  # int64 offsets are converted
            out = cache.lookup(ids, offsets)
            self.assertEqual((out.shape, out.dtype), ((30, 8), np.float32))
            want = np.concatenate([store.read(t, ids[10 * t:10 * t + 10]) for t in range(3)])
            np.testing.assert_array_equal(out, want)
            flat = np.empty(240, dtype=np.float32)
            np.testing.assert_array_equal(cache.lookup(ids, offsets, out=flat), want.reshape(-1))
            raw = np.empty(960, dtype=np.uint8)
            np.testing.assert_array_equal(cache.lookup(ids, offsets, out=raw).view(np.float32),
                                          want.reshape(-1))
        store.close()


class T04BadArrays(unittest.TestCase):
    def setUp(self):
        emc.load(LIB)
        self.store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        self.cache = emc.Cache(self.store, backend="host", capacity_bytes=1 << 16)
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
        self.assertTrue(e.func.startswith("emc_"), e.func)

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
        with emc.Cache(store, backend="host", capacity_bytes=1 << 16) as cache:
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
        cache = emc.Cache(store, backend="host", capacity_bytes=1 << 16)
        proxy = self.Proxy(real)
        cls = type("FakeCudaCache", (emc.Cache,), {"backend": "cuda"})
        cache.__class__ = cls
        emc._lib = proxy
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
            emc._lib = real
            cache.__class__ = emc.Cache
            cache.close()
            store.close()


if __name__ == "__main__":
    if LIB is None:
        sys.exit("usage: test_python.py LIBEMBCACHE_SO [PYTHON_DIR]")
    unittest.main(verbosity=2)
