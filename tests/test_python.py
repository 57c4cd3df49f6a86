#!/usr/bin/env python3
"""The Python binding (python_ctypes_example/embcache/) against a built libembcache.so.

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
  * training (host backend): a prefetched batch is all hits (lookup's `where`) even after a
    flood of other rows, and a prefetch over the pin budget raises EmcCapacityError
    (.partial: the fitting rows pinned, lookups still right); apply_gradients with SGD (sum
    and mean merges; f32, f16 and hashed tables, new hashed ids; a cache small enough to
    evict and write through) equals a NumPy reference bitwise, in the cache and in the store;
    row-wise Adagrad rows and accumulators (store.read_state) within 1e-6 relative; dedup's
    invariants (first-occurrence order per table, inverse, offsets, lookup of the distinct
    rows gathered by inverse equals the batch's lookup); bad grads, optimizer fields,
    batches and config raise EmcError with nothing changed; the CUDA plumbing of the new
    calls against the proxy; and train_example.py runs and its loss goes down.
Device arrays on the CUDA backend (CuPy, PyTorch, streams) need a GPU and are not run here.
"""
import ctypes
import os
import subprocess
import sys
import unittest

LIB = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
PYDIR = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                     "python_ctypes_example"))
sys.path.insert(0, PYDIR)
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



def inline_cache(store, **config):
    """A host cache as the suite's expectations assume it: a lookup's misses cached when it
    returns and stats exact without a flush (admission "inline"; the default, "auto", may admit
    on the cache's thread: T03bBackgroundAdmission covers it)."""
    config.setdefault("admission", "inline")
    return emc.Cache(store, **config)

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
        self.cache = inline_cache(self.store, backend="host", capacity_bytes=64 << 10)

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
        with inline_cache(store, backend="host", capacity_bytes=1 << 20) as cache:
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


class T03bBackgroundAdmission(unittest.TestCase):
    """admission="background": rows right, misses admitted by the cache's thread (counted once
    flush drained it), so the same lookup then hits; a bad name is refused."""

    def test_background(self):
        emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=1000, dim=8), emc.Table("b", rows=500, dim=8)])
        store.fill_uniform(0, -1.0, 1.0, seed=1)
        store.fill_uniform(1, -1.0, 1.0, seed=2)
        with self.assertRaises(emc.EmcError):
            emc.Cache(store, backend="host", admission="later")
        with emc.Cache(store, backend="host", capacity_bytes=1 << 20,
                       admission="background") as cache:
            self.assertEqual(cache.config["admission"], 1)
            self.assertEqual(cache.admission, "background")
        # the default, "auto": the admission thread where 2 or more CPUs are usable
        with emc.Cache(store, backend="host", capacity_bytes=1 << 20) as cache:
            self.assertEqual(cache.config["admission"], 2)
            self.assertEqual(cache.admission,
                             "background" if len(os.sched_getaffinity(0)) >= 2 else "inline")
        with emc.Cache(store, backend="host", admission="inline") as cache:
            self.assertEqual(cache.admission, "inline")
            ids = np.arange(40, dtype=np.uint64) * 3
            offsets = np.array([0, 20, 40])
            want = np.concatenate([store.read(0, ids[:20]), store.read(1, ids[20:])])
            out, where = cache.lookup(ids, offsets, where=True)
            np.testing.assert_array_equal(out, want)
            self.assertTrue((where == 1).all())  # every row from the store
            cache.flush()
            self.assertEqual(cache.stats()["admissions"] + cache.stats()["admit_skipped"], 40)
            out, where = cache.lookup(ids, offsets, where=True)
            np.testing.assert_array_equal(out, want)
            self.assertTrue((where == 0).all())  # every row from the cache now
        store.close()


class T03cSharedStore(unittest.TestCase):
    """Store.create_shared / attach / open_shared / unlink: a child process (a fresh
    interpreter) attaches and reads what this one wrote, and writes rows this one then reads,
    through a cache that held the old ones."""

    def test_shared(self):
        emc.load(LIB)
        name = f"/emct-py-{os.getpid()}"
        tables = [emc.Table("a", rows=1000, dim=8), emc.Table("h", rows=300, dim=4, kind="hashed")]
        with self.assertRaises(emc.EmcError) as cm:
            emc.Store.attach(name)
        self.assertEqual(cm.exception.status, emc.EMC_EIO)
        store = emc.Store.create_shared(name, tables)
        cache = None
        try:
            store.fill_uniform(0, -1.0, 1.0, seed=4)
            ids = np.arange(0, 1000, 7, dtype=np.uint64)
            want = store.read(0, ids)
            # a host cache over the shared store holds table 0's rows; the child overwrites
            # them, and the cache's next lookup returns the child's rows (the update log)
            cache = inline_cache(store, backend="host", capacity_bytes=1 << 20)
            offs = [0, len(ids), len(ids)]
            np.testing.assert_array_equal(cache.lookup(ids, offs).reshape(-1, 8), want)
            cache.flush()  # the default admission may run on the cache's thread: wait for it
            _, where = cache.lookup(ids, offs, where=True)
            self.assertTrue((where == 0).all())
            child = (
                "import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import embcache as emc\n"
                "emc.load(sys.argv[2]); s = emc.Store.attach(sys.argv[3])\n"
                "ids = np.arange(0, 1000, 7, dtype=np.uint64)\n"
                "sys.stdout.write(s.read(0, ids).tobytes().hex())\n"
                "s.write(1, np.array([2**63 + 5], dtype=np.uint64), np.full((1, 4), 2.5, np.float32))\n"
                "s.write(0, ids, np.full((len(ids), 8), 3.5, np.float32))\n"
                "s.close()\n")
            out = subprocess.run([sys.executable, "-c", child, PYDIR, LIB, name], check=True,
                                 capture_output=True, text=True).stdout
            self.assertEqual(bytes.fromhex(out), want.tobytes())
            np.testing.assert_array_equal(store.read(1, np.array([2**63 + 5], dtype=np.uint64)),
                                          np.full((1, 4), 2.5, np.float32))
            with self.assertRaises(emc.EmcError) as cm:
                emc.Store.create_shared(name, tables)
            self.assertEqual(cm.exception.status, emc.EMC_EIO)
            np.testing.assert_array_equal(cache.lookup(ids, offs).reshape(-1, 8),
                                          np.full((len(ids), 8), 3.5, np.float32))
        finally:
            if cache is not None:
                cache.close()
            store.close()
            emc.Store.unlink(name)
        with self.assertRaises(emc.EmcError):
            emc.Store.unlink(name)


class T03dGroup(unittest.TestCase):
    """Group: two ranks (threads; the calls release the GIL), each with its own cache over one
    shared store, step together; the store holds w - lr * (g0 + g1) for a row both ranks
    touched, w - lr * g for a row one touched; a rank that leaves breaks the group."""

    def test_group(self):
        import threading
        emc.load(LIB)
        name = f"/emct-pyg-{os.getpid()}"
        store = emc.Store.create_shared(name, [emc.Table("a", rows=64, dim=4)])
        caches, groups = [], []
        try:
            store.fill_uniform(0, -1.0, 1.0, seed=3)
            w0 = store.read(0, np.arange(64, dtype=np.uint64))
            caches = [inline_cache(store, backend="host", capacity_bytes=1 << 16) for _ in range(2)]
            groups = [emc.Group(store, r, 2, timeout_ms=5000) for r in range(2)]
            with self.assertRaises(emc.EmcError) as cm:
                emc.Group(store, 0, 2)  # rank 0 again
            self.assertEqual(cm.exception.status, emc.EMC_EINVAL)
            opt = emc.Optimizer(kind="sgd", lr=0.5)
            ids = [np.array([1, 2, 1], dtype=np.uint64), np.array([2, 5], dtype=np.uint64)]
            grads = [np.full((3, 4), 0.25, np.float32), np.full((2, 4), 1.0, np.float32)]
            errors = []

            def step(r):
                try:
                    caches[r].lookup(ids[r], [0, len(ids[r])])
                    groups[r].apply_gradients(caches[r], ids[r], [0, len(ids[r])], grads[r], opt)
                except Exception as e:  # reported below
                    errors.append(e)
            th = [threading.Thread(target=step, args=(r,)) for r in range(2)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            self.assertEqual(errors, [])
            want = w0.copy()
            want[1] -= np.float32(0.5) * np.float32(0.5)           # rank 0: 0.25 + 0.25
            want[2] -= np.float32(0.5) * np.float32(1.25)          # rank 0 0.25 + rank 1 1.0
            want[5] -= np.float32(0.5) * np.float32(1.0)
            got = store.read(0, np.arange(64, dtype=np.uint64))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
            for c in caches:  # every cache returns the new rows
                np.testing.assert_array_equal(
                    c.lookup(np.array([1, 2, 5], dtype=np.uint64), [0, 3]), got[[1, 2, 5]])
            with self.assertRaises(emc.EmcError):
                store.close()  # caches and groups still use it
            groups[1].leave()
            with self.assertRaises(emc.EmcError) as cm:
                groups[0].apply_gradients(caches[0], ids[0], [0, 3], grads[0], opt)
            self.assertEqual(cm.exception.status, emc.EMC_ETIMEDOUT)
        finally:
            for g in groups:
                g.leave()
            for c in caches:
                c.close()
            store.close()
            emc.Store.unlink(name)


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
def sgd_reference_step(ref, ids, grads, lr, mean, f16=False):
    """One SGD step of emc_apply_gradients on `ref` (id -> float32 row) for one table's segment:
    each distinct id's gradients summed in increasing position order in float32, divided by
    the count for MEAN, then w = fmaf(-lr, g, w).

    NumPy has no fma, and w - lr*g computed as two float32 operations rounds twice: in general
    that is not fmaf. The tests make the product exact instead: lr is a power of two, so lr * g
    is g with another exponent (no rounding, far from the subnormals), and fmaf(-lr, g, w),
    which rounds w - lr*g once, equals float32 w minus the float32 product, which rounds only
    the subtraction. The gradients are multiples of 1/1024 below 1/2 in magnitude, so their
    float32 sums are exact too (the order matters only when sums round; it is still the
    library's). MEAN's one division is correctly rounded in both. f16 tables: the float32
    result rounded to nearest even, as astype(float16) does."""
    lr = np.float32(lr)
    positions = {}
    for p, i in enumerate(ids.tolist()):
        positions.setdefault(i, []).append(p)
    for i, ps in positions.items():
        acc = grads[ps[0]].copy()
        for p in ps[1:]:
            acc = acc + grads[p]  # float32 + float32: one rounding, position order
        if mean and len(ps) > 1:
            acc = acc / np.float32(len(ps))
        new = ref[i] - lr * acc  # lr * acc exact (above); the subtraction rounds once
        ref[i] = new.astype(np.float16).astype(np.float32) if f16 else new


def adagrad_reference_step(ref, state, ids, grads, lr, eps, init, mean):
    """Row-wise Adagrad as embcache.h states it, every float32 operation rounded in order:
    stored += (sum_j g_j * g_j, in element order) / dim; s = init + stored;
    w_j = w_j - (lr * g_j) / (sqrt(s) + eps)."""
    f = np.float32
    positions = {}
    for p, i in enumerate(ids.tolist()):
        positions.setdefault(i, []).append(p)
    for i, ps in positions.items():
        g = grads[ps[0]].copy()
        for p in ps[1:]:
            g = g + grads[p]
        if mean and len(ps) > 1:
            g = g / f(len(ps))
        sq = f(0)
        for x in g:
            sq = f(sq + f(x * x))
        state[i] = f(state.get(i, f(0)) + f(sq / f(g.size)))
        denom = f(np.sqrt(f(f(init) + state[i])) + f(eps))
        ref[i] = ref[i] - (f(lr) * g) / denom


class T08Prefetch(unittest.TestCase):
    def setUp(self):
        emc.load(LIB)
        self.store, self.present = make_store()

    def tearDown(self):
        self.store.close()

    def test_prefetched_batch_is_all_hits_despite_a_flood(self):
        rng = np.random.default_rng(8)
        cap = 64 << 10
        with inline_cache(self.store, backend="host", capacity_bytes=cap, prefetch_depth=1) as c:
            self.assertEqual(c.config["prefetch_depth"], 1)
            nxt = make_batch(rng, self.present, n=(60, 40, 50))
            c.prefetch(*nxt)
            for step in range(20):
                cur, nxt = nxt, make_batch(rng, self.present, n=(60, 40, 50))
                c.prefetch(*nxt)  # cur stays pinned through this one prefetch (depth 1)
                flood = make_batch(rng, self.present, n=(600, 400, 0))  # > the cache: evicts
                c.lookup(*flood)
                ids, offsets = cur
                out, where = c.lookup(ids, offsets, where=True)
                tags = ids[int(offsets[2]):]
                absent = np.concatenate([np.zeros(int(offsets[2]), bool),
                                         ~np.isin(tags, self.present)])
                np.testing.assert_array_equal(where[absent], emc.WHERE_ABSENT)
                np.testing.assert_array_equal(where[~absent], emc.WHERE_CACHE,
                                              f"step {step}: a prefetched row missed")
                for t, got in enumerate(c.split(out, offsets)):
                    np.testing.assert_array_equal(
                        got, self.store.read(t, ids[int(offsets[t]):int(offsets[t + 1])]))
                st = c.stats()
                self.assertLessEqual(st["pinned_bytes"], 0.80 * cap)
            self.assertGreater(st["prefetched"], 0)
            self.assertGreater(st["evictions"], 0)
            self.assertEqual(st["pin_shortfall"], 0)

    def test_capacity_is_a_partial_success(self):
        cap = 16 << 10
        with inline_cache(self.store, backend="host", capacity_bytes=cap) as c:
            ids = np.arange(1000, dtype=np.uint64)  # 1000 rows of 64 bytes: over t2 * 16 KiB
            offsets = np.array([0, 1000, 1000, 1000], dtype=np.uint64)
            with self.assertRaises(emc.EmcCapacityError) as cm:
                c.prefetch(ids, offsets)
            e = cm.exception
            self.assertIsInstance(e, emc.EmcError)
            self.assertEqual((e.status, e.name, e.func), (emc.EMC_ECAPACITY, "EMC_ECAPACITY",
                                                          "emc_prefetch"))
            self.assertTrue(e.partial)
            self.assertIn("pin budget", e.detail)
            st = c.stats()
            self.assertGreater(st["pinned_rows"], 0)  # what fits is pinned
            self.assertEqual(st["pinned_rows"] + st["pin_shortfall"], 1000)
            self.assertLessEqual(st["pinned_bytes"], 0.80 * cap)
            rows = c.split(c.lookup(ids, offsets), offsets)[0]  # still right
            np.testing.assert_array_equal(rows, self.store.read(0, ids))
            # a small batch: the big one is still in the window (depth 1), then it leaves it
            small = (np.arange(5000 - 10, 5000, dtype=np.uint64),
                     np.array([0, 10, 10, 10], dtype=np.uint64))
            try:
                c.prefetch(*small)
            except emc.EmcCapacityError:
                pass
            c.prefetch(*small)
            self.assertEqual(c.stats()["pinned_rows"], 10)

            # apply_gradients of more distinct rows than the cache holds: nothing changes
            before = c.stats()["gradient_rows"]
            with self.assertRaises(emc.EmcCapacityError) as cm:
                c.apply_gradients(ids, offsets, np.ones(1000 * 16, np.float32), emc.Optimizer())
            self.assertFalse(cm.exception.partial)
            self.assertEqual(c.stats()["gradient_rows"], before)
        np.testing.assert_array_equal(self.store.read(0, ids), rows)


class T09SgdBitwise(unittest.TestCase):
    def run_steps(self, merge):
        emc.load(LIB)
        dim = 8
        store = emc.Store([emc.Table("f32", rows=500, dim=dim),
                           emc.Table("f16", rows=300, dim=dim, dtype="f16"),
                           emc.Table("hashed", rows=400, dim=dim, kind="hashed")])
        rng = np.random.default_rng(9)
        present = np.unique(rng.integers(0, 2**64 - 1, 200, dtype=np.uint64, endpoint=True))
        newcomers = rng.integers(0, 2**64 - 1, 100, dtype=np.uint64, endpoint=True)
        store.write(2, present, np.zeros((present.size, dim), np.float32))
        for t in range(3):
            store.fill_uniform(t, -1.0, 1.0, seed=900 + t)
        universe = [np.arange(500, dtype=np.uint64), np.arange(300, dtype=np.uint64),
                    np.concatenate([present, newcomers])]
        ref = [dict(zip(u.tolist(), store.read(t, u).astype(np.float32)))
               for t, u in enumerate(universe)]  # absent hashed ids: zero rows, as created
        opt = emc.Optimizer("sgd", merge=merge, lr=2.0**-4)
        try:
            # 8 KiB: rows stepped in place, admitted first, and written through to the store
            with inline_cache(store, backend="host", capacity_bytes=8 << 10) as c:
                for step in range(25):
                    n = rng.integers(0, 120, 3)  # empty segments too
                    ids = np.concatenate([universe[t][rng.integers(0, 60 + 60 * t, n[t])]
                                          for t in range(3)])  # ranges small: duplicates
                    offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.uint64)
                    grads = (rng.integers(-511, 512, (ids.size, dim)) / 1024).astype(np.float32)
                    c.apply_gradients(ids, offsets, grads, opt)
                    for t in range(3):
                        sl = slice(int(offsets[t]), int(offsets[t + 1]))
                        sgd_reference_step(ref[t], ids[sl], grads[sl], opt.lr, merge == "mean",
                                           f16=(t == 1))
                    got = c.split(c.lookup(ids, offsets), offsets)
                    for t in range(3):
                        seg = ids[int(offsets[t]):int(offsets[t + 1])].tolist()
                        want = np.array([ref[t][i] for i in seg], np.float32).reshape(-1, dim)
                        np.testing.assert_array_equal(got[t].astype(np.float32), want,
                                                      f"step {step} table {t} ({merge})")
                st = c.stats()
                self.assertGreater(st["gradient_rows"], 0)
                self.assertGreater(st["evictions"] + st["admit_skipped"], 0)
            for t in range(3):  # after emc_cache_destroy's write-back: the store, bitwise
                u = universe[t]
                touched = [i for i in u.tolist() if t != 2 or i in ref[t]]
                want = np.array([ref[t][i] for i in touched], np.float32)
                got = store.read(t, np.array(touched, np.uint64)).astype(np.float32)
                np.testing.assert_array_equal(got, want, f"store table {t}")
        finally:
            store.close()

    def test_sum(self):
        self.run_steps("sum")

    def test_mean(self):
        self.run_steps("mean")


class T10Adagrad(unittest.TestCase):
    def test_rowwise_adagrad_and_state(self):
        emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=300, dim=8, state="adagrad"),
                           emc.Table("b", rows=200, dim=4, state="adagrad")])
        self.assertEqual([t.state for t in store.tables], ["adagrad", "adagrad"])
        store.fill_uniform(0, -1, 1, 10)
        store.fill_uniform(1, -1, 1, 11)
        rng = np.random.default_rng(10)
        opt = emc.Optimizer("rowwise_adagrad", merge="mean", lr=0.05, eps=1e-6,
                            initial_accumulator=0.1)
        all_ids = [np.arange(300, dtype=np.uint64), np.arange(200, dtype=np.uint64)]
        ref = [dict(zip(u.tolist(), store.read(t, u))) for t, u in enumerate(all_ids)]
        state = [{}, {}]
        try:
            with inline_cache(store, backend="host", capacity_bytes=8 << 10) as c:
                for step in range(15):
                    n = rng.integers(1, 80, 2)
                    ids = np.concatenate([rng.integers(0, 40, n[0]), rng.integers(0, 30, n[1])])
                    ids = ids.astype(np.uint64)
                    offsets = np.array([0, n[0], n[0] + n[1]], dtype=np.uint64)
                    # dims differ: the 1-D float32 form, split into per-table views
                    grads = np.empty(n[0] * 8 + n[1] * 4, np.float32)
                    for g in c.split(grads, offsets):
                        g[:] = rng.standard_normal(g.shape).astype(np.float32)
                    c.apply_gradients(ids, offsets, grads, opt)
                    for t, g in enumerate(c.split(grads, offsets)):
                        seg = ids[int(offsets[t]):int(offsets[t + 1])]
                        adagrad_reference_step(ref[t], state[t], seg, g, opt.lr, opt.eps,
                                               opt.initial_accumulator, mean=True)
                c.flush()
                for t in range(2):
                    u = all_ids[t]
                    want = np.array([ref[t][i] for i in u.tolist()])
                    np.testing.assert_allclose(store.read(t, u), want, rtol=1e-6, atol=1e-7)
                    want_state = np.array([state[t].get(i, 0.0) for i in u.tolist()], np.float32)
                    got_state = store.read_state(t, u)
                    self.assertEqual(got_state.dtype, np.float32)
                    np.testing.assert_allclose(got_state, want_state, rtol=1e-6)
                    self.assertTrue((got_state[:30] > 0).any() and (got_state[40:] == 0).all())
        finally:
            store.close()

    def test_adagrad_needs_state(self):
        emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=10, dim=4, state="adagrad"),
                           emc.Table("b", rows=10, dim=4)])
        try:
            with inline_cache(store, backend="host", capacity_bytes=1 << 16) as c:
                ids, offsets = np.array([1, 2], np.uint64), [0, 1, 2]
                with self.assertRaises(emc.EmcError) as cm:
                    c.apply_gradients(ids, offsets, np.ones((2, 4), np.float32),
                                      emc.Optimizer("rowwise_adagrad"))
                e = cm.exception
                self.assertEqual(e.status, emc.EMC_EINVAL)
                self.assertEqual(e.detail, emc.library().emc_last_error_detail().decode())
                self.assertIn("EMC_STATE_ADAGRAD", e.detail)
                self.assertEqual(c.stats()["gradient_rows"], 0)
                # a batch with ids only in the table with state trains: a store may mix
                c.apply_gradients(np.array([1], np.uint64), [0, 1, 1],
                                  np.ones((1, 4), np.float32), emc.Optimizer("rowwise_adagrad"))
                self.assertEqual(c.stats()["gradient_rows"], 1)
                c.apply_gradients(ids, offsets, np.ones((2, 4), np.float32), emc.Optimizer())
            # read_state: zeros for untouched rows (id 1's accumulator: mean(1 * 1) = 1), the
            # library's EINVAL for a stateless table
            st0 = store.read_state(0, np.arange(10, dtype=np.uint64))
            self.assertEqual(st0[1], 1.0)
            np.testing.assert_array_equal(np.delete(st0, 1), 0)
            with self.assertRaises(emc.EmcError) as cm:
                store.read_state(1, ids)
            self.assertEqual(cm.exception.status, emc.EMC_EINVAL)
            with self.assertRaises(emc.EmcError) as cm:
                store.read_state(0, np.array([10], np.uint64))
            self.assertEqual(cm.exception.status, emc.EMC_ERANGE)
            with self.assertRaises(emc.EmcError) as cm:
                store.read_state(2, ids)
            self.assertEqual(cm.exception.status, emc.EMC_ERANGE)
            with self.assertRaises(emc.EmcError) as cm:
                store.read_state(0, ids, out=np.empty(2, np.float64))
            self.assertIn("float32", cm.exception.detail)
            out = np.full(2, 7, np.float32)
            self.assertIs(store.read_state(0, ids, out=out), out)
            np.testing.assert_array_equal(out, [1, 0])  # ids 1, 2
        finally:
            store.close()


class T11Dedup(unittest.TestCase):
    def test_invariants(self):
        emc.load(LIB)
        store, present = make_store()
        rng = np.random.default_rng(11)
        try:
            with inline_cache(store, backend="host", capacity_bytes=1 << 20) as c:
                for _ in range(10):
                    ids, offsets = make_batch(rng, present, n=tuple(rng.integers(0, 200, 3)))
                    ids[:int(offsets[1])] %= 50  # many duplicates in table 0
                    uids, uoff, inv = c.dedup(ids, offsets)
                    self.assertEqual((uids.dtype, uoff.dtype, inv.dtype),
                                     (np.uint64, np.uint64, np.uint32))
                    self.assertEqual((uoff.shape, inv.shape), ((4,), ids.shape))
                    self.assertEqual((int(uoff[0]), int(uoff[-1])), (0, uids.size))
                    self.assertTrue((np.diff(uoff.astype(np.int64)) >= 0).all())
                    np.testing.assert_array_equal(uids[inv], ids)
                    for t in range(3):
                        seg = ids[int(offsets[t]):int(offsets[t + 1])]
                        useg = uids[int(uoff[t]):int(uoff[t + 1])]
                        self.assertEqual(useg.tolist(), list(dict.fromkeys(seg.tolist())))
                        iseg = inv[int(offsets[t]):int(offsets[t + 1])]
                        self.assertTrue(((iseg >= uoff[t]) & (iseg < uoff[t + 1])).all())
                    # look the distinct rows up once, gather by inverse: the batch's rows
                    full = c.split(c.lookup(ids, offsets), offsets)
                    uniq = c.split(c.lookup(uids, uoff), uoff)
                    for t in range(3):
                        iseg = inv[int(offsets[t]):int(offsets[t + 1])].astype(np.int64)
                        np.testing.assert_array_equal(uniq[t][iseg - int(uoff[t])], full[t])
                uids, uoff, inv = c.dedup(np.empty(0, np.uint64), [0, 0, 0, 0])
                self.assertEqual((uids.size, inv.size, uoff.tolist()), (0, 0, [0, 0, 0, 0]))
                with self.assertRaises(emc.EmcError) as cm:
                    c.dedup(np.array([5000], np.uint64), [0, 1, 1, 1])
                self.assertEqual(cm.exception.status, emc.EMC_ERANGE)
        finally:
            store.close()


class T12TrainingBadInputs(unittest.TestCase):
    def setUp(self):
        emc.load(LIB)
        self.store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        self.store.fill_uniform(0, -1, 1, 1)
        self.cache = inline_cache(self.store, backend="host", capacity_bytes=1 << 16)
        self.ids = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
        self.offsets = np.array([0, 3, 5], dtype=np.uint64)
        self.grads = np.ones((5, 4), np.float32)

    def tearDown(self):
        self.cache.close()
        self.store.close()

    raises = T04BadArrays.raises

    def unchanged(self, fn, *needles, status=emc.EMC_EINVAL):
        """fn raises EmcError(status) with the needles in its detail, and the cache's counters
        and rows do not move."""
        before, rows = self.cache.stats(), self.store.read(0, self.ids[:3]).copy()
        self.raises(fn, *needles, status=status)
        self.assertEqual(self.cache.stats(), before)
        self.cache.flush()
        np.testing.assert_array_equal(self.store.read(0, self.ids[:3]), rows)

    def test_grads(self):
        c, i, o, opt = self.cache, self.ids, self.offsets, emc.Optimizer()
        self.unchanged(lambda: c.apply_gradients(i, o, self.grads.astype(np.float64), opt),
                       "float64 (5, 4)", "float32 (5, 4)", "float32 (20,)")
        self.unchanged(lambda: c.apply_gradients(i, o, self.grads.astype(np.float16), opt),
                       "float16", "whatever the tables' dtype")
        self.unchanged(lambda: c.apply_gradients(i, o, np.ones((5, 5), np.float32), opt), "(5, 5)")
        self.unchanged(lambda: c.apply_gradients(i, o, np.ones((4, 4), np.float32), opt), "(4, 4)")
        self.unchanged(lambda: c.apply_gradients(i, o, np.ones(21, np.float32), opt), "(21,)")
        self.unchanged(lambda: c.apply_gradients(i, o, np.ones((5, 8), np.float32)[:, :4], opt),
                       "not C-contiguous")
        self.unchanged(lambda: c.apply_gradients(i, o, self.grads.tolist(), opt),
                       "expected a NumPy array")
        host = self.grads

        class FakeCuda:
            __cuda_array_interface__ = {"shape": (5, 4), "typestr": "<f4", "strides": None,
                                        "data": (host.ctypes.data, True), "version": 3}
        self.unchanged(lambda: c.apply_gradients(i, o, FakeCuda(), opt), "grads: device memory")
        ro = self.grads.copy()
        ro.flags.writeable = False
        c.apply_gradients(i, o, ro, opt)  # grads are only read
        c.apply_gradients(i, o, ro.reshape(-1), opt)  # the 1-D form
        self.assertEqual(c.stats()["gradient_rows"], 10)

    def test_optimizer(self):
        c, i, o, g = self.cache, self.ids, self.offsets, self.grads
        for bad, needle in [(dict(kind="adam"), "kind 'adam'"), (dict(kind=1), "kind 1"),
                            (dict(merge="median"), "merge 'median'"),
                            (dict(lr=float("nan")), "lr = nan"),
                            (dict(lr=np.float32("inf")), "lr = inf"),
                            (dict(lr=1e39), "finite as a float32"),
                            (dict(lr="0.1"), "real number"), (dict(lr=None), "real number"),
                            (dict(lr=True), "real number"),
                            (dict(eps=-1e-8), "eps = -1e-08"), (dict(eps=float("nan")), "eps"),
                            (dict(initial_accumulator=-0.5), "initial_accumulator = -0.5"),
                            (dict(initial_accumulator=float("inf")), "initial_accumulator"),
                            (dict(learning_rate=0.1), "unknown field 'learning_rate'")]:
            self.raises(lambda: emc.Optimizer(**bad), needle)
        ok = emc.Optimizer(lr=-0.5, eps=0, initial_accumulator=0)  # negative lr: ascent, allowed
        self.assertEqual(ok, emc.Optimizer(lr=-0.5, eps=0.0))
        self.assertIn("lr=-0.5", repr(ok))
        self.unchanged(lambda: c.apply_gradients(i, o, g, None), "need an embcache.Optimizer")
        self.unchanged(lambda: c.apply_gradients(i, o, g, {"lr": 0.1}), "got dict")
        opt = emc.Optimizer()
        opt.lr = float("nan")  # reassigned after construction: checked again at the call
        self.unchanged(lambda: c.apply_gradients(i, o, g, opt), "lr = nan")
        opt.lr, opt.merge = 0.1, "avg"
        self.unchanged(lambda: c.apply_gradients(i, o, g, opt), "merge 'avg'")

    def test_batches_and_config(self):
        c, o, opt = self.cache, self.offsets, emc.Optimizer()
        bad_ids = np.array([1, 2, 100, 4, 5], dtype=np.uint64)
        for fn in (lambda: c.prefetch(bad_ids, o),
                   lambda: c.apply_gradients(bad_ids, o, self.grads, opt),
                   lambda: c.dedup(bad_ids, o)):
            self.unchanged(fn, "100", status=emc.EMC_ERANGE)
        for fn in (lambda: c.prefetch(self.ids.astype(np.int32), o),
                   lambda: c.apply_gradients(self.ids.astype(np.int32), o, self.grads, opt),
                   lambda: c.dedup(self.ids.astype(np.int32), o)):
            self.unchanged(fn, "dtype int32")
        self.unchanged(lambda: c.prefetch(self.ids, o[:2]), "n_tables + 1 = 3")
        self.unchanged(lambda: c.prefetch(self.ids[:4], o), "offsets[-1] = 5")
        self.unchanged(lambda: c.prefetch(self.ids, np.array([0, 6, 5], np.uint64)))  # library's
        self.unchanged(lambda: c.prefetch(self.ids, o, stream=3), "stream")
        self.unchanged(lambda: c.apply_gradients(self.ids, o, self.grads, opt, stream=3), "stream")
        self.raises(lambda: emc.Table("x", 10, 4, state="sgd"), "state 'sgd'")
        self.cache.close()
        e = self.raises(lambda: emc.Cache(self.store, backend="host", prefetch_depth=15),
                        "prefetch_depth")
        self.assertEqual(e.detail, emc.library().emc_last_error_detail().decode())
        self.cache = inline_cache(self.store, backend="host", capacity_bytes=1 << 16,
                               prefetch_depth=0)
        self.cache.prefetch(self.ids, o)
        self.assertEqual(self.cache.stats()["pinned_rows"], 5)


class T13TrainingPlumbing(unittest.TestCase):
    """prefetch / apply_gradients on a Cache that claims the CUDA backend (T07's library proxy
    records the calls): pointers, stream, the optimizer struct."""
    Cai, DLDevice = T07CudaPlumbing.Cai, T07CudaPlumbing.DLDevice

    class Proxy(T07CudaPlumbing.Proxy):
        def emc_prefetch(self, *args):
            self.calls.append(("prefetch",) + args)
            return 0

        def emc_apply_gradients(self, *args):
            self.calls.append(("apply",) + args)
            return 0

    def test_streams_and_pointers(self):
        real = emc.load(LIB)
        store = emc.Store([emc.Table("a", rows=100, dim=4), emc.Table("b", rows=50, dim=4)])
        cache = inline_cache(store, backend="host", capacity_bytes=1 << 16)
        proxy = self.Proxy(real)
        cache.__class__ = type("FakeCudaCache", (emc.Cache,), {"backend": "cuda"})
        emc._capi._lib = proxy
        try:
            ids = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
            grads = np.ones((5, 4), np.float32)
            offsets = [0, 3, 5]
            cache.prefetch(self.Cai(ids, stream=7), offsets)
            self.assertEqual(proxy.calls[-1][0], "prefetch")
            self.assertEqual((proxy.calls[-1][2], proxy.calls[-1][-1]), (ids.ctypes.data, 7))
            cache.apply_gradients(self.Cai(ids), offsets, self.Cai(grads, stream=2),
                                  emc.Optimizer("sgd", "mean", lr=0.25))
            name, _, p_ids, _, p_grads, opt, st = proxy.calls[-1]
            self.assertEqual((name, p_ids, p_grads, st), ("apply", ids.ctypes.data,
                                                          grads.ctypes.data, 2))
            o = opt._obj
            self.assertEqual((o.struct_size, o.kind, o.merge, o.lr),
                             (ctypes.sizeof(emc._Optimizer), 0, 1, 0.25))
            if hasattr(np.ndarray, "__dlpack__"):
                d = self.DLDevice(grads)
                cache.apply_gradients(ids, offsets, d, emc.Optimizer(), stream=11)
                self.assertEqual((proxy.calls[-1][-1], d.asked), (11, [11]))
        finally:
            emc._capi._lib = real
            cache.__class__ = emc.Cache
            cache.close()
            store.close()


class T15Lifetime(unittest.TestCase):
    """Handles and Python's threads and garbage collector: close() waits for the calls in
    flight on other threads (ctypes releases the GIL), and later calls raise EmcError."""

    def run_child(self, code):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "EMC_LIB": LIB}
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {PYDIR!r})\n"
                            + code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, f"rc {r.returncode}\n{r.stdout}{r.stderr}")
        return r.stdout

    def test_close_while_another_thread_looks_up(self):
        # In a child process: before the fix, emc_cache_destroy freed the cache under the
        # other thread's emc_lookup and the interpreter died (SIGSEGV).
        out = self.run_child(r"""
import threading
import numpy as np
import embcache as emc
s = emc.Store([emc.Table("a", rows=200_000, dim=32)]); s.fill_uniform(0, -1, 1, seed=1)
for rep in range(3):
    c = emc.Cache(s, capacity_bytes=4 << 20, backend="host", admission="inline")
    ids = np.random.default_rng(rep).integers(0, 200_000, 20_000).astype(np.uint64)
    started, got = threading.Event(), []
    def worker():
        try:
            for i in range(100000):
                c.lookup(ids, [0, len(ids)])
                started.set()
            got.append("finished")
        except emc.EmcError as e:
            got.append(e)
        except BaseException as e:
            got.append(repr(e))
        started.set()
    t = threading.Thread(target=worker); t.start()
    started.wait(60)
    c.close()
    t.join(60)
    assert not t.is_alive(), "worker hangs"
    e = got[0]
    assert isinstance(e, emc.EmcError) and "closed" in e.detail and e.status == emc.EMC_EINVAL, e
    try:
        c.lookup(ids, [0, len(ids)])
        raise AssertionError("lookup after close")
    except emc.EmcError as e:
        assert "closed" in e.detail, e
    c.close()  # twice is fine
s.close()
print("ok")
""")
        self.assertIn("ok", out)

    def test_two_closes_destroy_once(self):
        # Two threads closing one cache at once: the second waits for the first and finds it
        # closed (it used to take the same handle and destroy it again: a double free).
        out = self.run_child(r"""
import threading
import embcache as emc
lib = emc.library()
destroyed, real = [], lib.emc_cache_destroy
gate = threading.Event()
class Slow:  # emc_cache_destroy, slowed so that the two closes overlap
    def __call__(self, h):
        destroyed.append(h.value if hasattr(h, "value") else h)
        gate.wait(5)
        return real(h)
s = emc.Store([emc.Table("a", rows=100, dim=4)])
c = emc.Cache(s, capacity_bytes=1 << 16, backend="host")
lib.emc_cache_destroy = Slow()
t = [threading.Thread(target=c.close) for _ in range(2)]
for x in t: x.start()
import time; time.sleep(0.3); gate.set()
for x in t: x.join(30)
lib.emc_cache_destroy = real
assert len(destroyed) == 1, destroyed
s.close()  # the store's user count is right: it can be closed
print("ok")
""")
        self.assertIn("ok", out)

    def test_close_inside_own_call_raises(self):
        # close() from a thread that has a call in flight on the object (a signal handler
        # during lookup, a buffer hook) raises instead of waiting for itself for ever.
        s = emc.Store([emc.Table("a", rows=100, dim=4)])
        c = emc.Cache(s, capacity_bytes=1 << 16, backend="host")
        with c._call("test"):
            with self.assertRaises(emc.EmcError) as cm:
                c.close()
            self.assertIn("inside a call", cm.exception.detail)
        c.lookup(np.arange(3, dtype=np.uint64), [0, 3])  # still open, still works
        c.close()
        s.close()

    def test_fork_child_starts_with_no_call_in_flight(self):
        # A child of fork() inherits no calls in flight (another parent thread's call would
        # have made the child's close() wait for ever).
        if not hasattr(os, "fork"):
            self.skipTest("no fork")
        out = self.run_child(r"""
import os, threading
import embcache as emc
s = emc.Store([emc.Table("a", rows=100, dim=4)])
c = emc.Cache(s, capacity_bytes=1 << 16, backend="host")
inside, release = threading.Event(), threading.Event()
def hold():
    with c._call("test"):
        inside.set()
        release.wait(30)
t = threading.Thread(target=hold); t.start(); inside.wait(30)
pid = os.fork()
if pid == 0:
    c.close(); s.close()
    os._exit(0)
_, st = os.waitpid(pid, 0)
release.set(); t.join(30)
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
c.close(); s.close()
print("ok")
""")
        self.assertIn("ok", out)


    REFUSED = "the store was not freed"

    def reset_detail(self):
        """Set emc_last_error_detail() to a known, unrelated text (a refused call)."""
        lib = emc.library()
        lib.emc_store_table(None, 0, None)
        return lib.emc_last_error_detail().decode()

    def live(self):
        return dict(getattr(emc, "_LIVE", {}))

    def test_store_cache_cycle_is_freed(self):
        # A Store and its Cache in a reference cycle: the collector clears weak references
        # before it runs finalizers. Before the fix Store.__del__ saw no open cache, called
        # emc_store_destroy, which the library refused (a cache attached), and dropped the
        # handle anyway: the store leaked. Now the store is destroyed by whichever finalizer
        # runs last, in any order.
        import gc
        ids = np.array([1, 2], np.uint64)
        before = self.live()

        class Model:  # the cycle a bound method of itself makes
            def __init__(self):
                self.store = emc.Store([emc.Table("a", rows=1000, dim=4)])
                self.cache = emc.Cache(self.store, capacity_bytes=1 << 16, backend="host")
                self.step = self._step

            def _step(self, ids):
                return self.cache.lookup(ids, [0, len(ids)])

        for build in ("store->cache", "cache->store", "model"):
            gc.collect()
            known = self.reset_detail()
            if build == "model":
                m = Model()
                m.step(ids)
                del m
            else:
                st = emc.Store([emc.Table("a", rows=1000, dim=4)])
                c = emc.Cache(st, capacity_bytes=1 << 16, backend="host")
                c.lookup(ids, [0, 2])
                if build == "store->cache":
                    st.peer = c
                else:
                    c.peer = st
                del st, c
            gc.collect()
            detail = emc.library().emc_last_error_detail().decode()
            self.assertNotIn(self.REFUSED, detail, build)
            self.assertEqual(detail, known, build)
            self.assertEqual(self.live(), before, build)  # no store nor cache handle left

    def test_finalizer_order(self):
        # Both orders of the two finalizers, run by hand: the store's first (the handle is
        # kept, pending) then the cache's (destroys the cache, then the store); and an
        # explicit close() of a store with a cache open still raises and keeps the handle.
        before = self.live()
        st = emc.Store([emc.Table("a", rows=100, dim=4)])
        c = emc.Cache(st, capacity_bytes=1 << 16, backend="host")
        with self.assertRaises(emc.EmcError) as cm:
            st.close()
        self.assertIn("attached", cm.exception.detail)
        self.assertTrue(st._h)
        known = self.reset_detail()
        st.__del__()                    # the collector's order: the store's finalizer first
        self.assertTrue(st._h, "the handle the library refused to destroy was dropped")
        self.assertEqual(emc.library().emc_last_error_detail().decode(), known)
        c.__del__()                     # then the cache's: destroys both
        self.assertFalse(c._h)
        self.assertFalse(st._h)
        self.assertEqual(emc.library().emc_last_error_detail().decode(), known)
        self.assertEqual(self.live(), before)
        st2 = emc.Store([emc.Table("a", rows=100, dim=4)])
        c2 = emc.Cache(st2, capacity_bytes=1 << 16, backend="host")
        c2.__del__()
        st2.__del__()
        self.assertFalse(st2._h)
        self.assertEqual(self.live(), before)


class T16IntegerArguments(unittest.TestCase):
    """Integers for fixed-width C parameters and fields (uint32, uint64, size_t, int) are
    range-checked by the binding: before, ctypes kept their low bits silently
    (fill_uniform(2**32 + 1) filled table 1, dim=2**32 + 4 made dim 4, ...). Non-integers
    raise EmcError too, not TypeError / ctypes.ArgumentError."""

    def setUp(self):
        emc.load(LIB)
        self.store = emc.Store([emc.Table("a", rows=10, dim=4), emc.Table("b", rows=10, dim=4)])
        self.store.fill_uniform(0, -1.0, 1.0, seed=1)
        self.store.fill_uniform(1, 5.0, 5.0, seed=1)

    def tearDown(self):
        self.store.close()

    def raises(self, fn, *needles, status=None):
        with self.assertRaises(emc.EmcError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.status, status or emc.EMC_EINVAL, str(e))
        for n in needles:
            self.assertIn(n, e.detail)
        return e

    def test_wrapping_integers(self):
        s, ids = self.store, np.arange(10, dtype=np.uint64)
        b1 = s.read(1, ids).copy()
        self.raises(lambda: s.fill_uniform(2**32 + 1, 9.0, 9.0, seed=3), "table",
                    status=emc.EMC_ERANGE)  # as the library says for a table past the last
        np.testing.assert_array_equal(s.read(1, ids), b1)  # table 1 untouched
        self.raises(lambda: s.fill_uniform(0, 9.0, 9.0, seed=2**64), "seed")
        self.raises(lambda: s.fill_uniform(0, 9.0, 9.0, seed=-1), "seed")
        self.raises(lambda: s.fill_uniform(-1, 9.0, 9.0, seed=1), "table", status=emc.EMC_ERANGE)
        np.testing.assert_array_equal(s.read(1, ids), b1)
        for fn in (lambda: s.read(2**32, ids[:1]), lambda: s.read(-1, ids[:1]),
                   lambda: s.write(2**32 + 1, ids[:1], np.zeros((1, 4), np.float32)),
                   lambda: s.read_state(2**32, ids[:1])):
            self.raises(fn, "table", status=emc.EMC_ERANGE)
        np.testing.assert_array_equal(s.read(np.int64(1), ids), b1)  # integers of any kind
        self.raises(lambda: emc.Table("w", rows=10, dim=2**32 + 4), "dim")
        self.raises(lambda: emc.Table("w", rows=2**64 + 10, dim=4), "rows")
        self.raises(lambda: emc.Table("w", rows=-1, dim=4), "rows")
        t = emc.Table("w", rows=10, dim=4)
        t.dim = 2**32 + 4  # reassigned after the check: checked again by Store()
        self.raises(lambda: emc.Store([t]), "dim")
        for field, v in (("capacity_bytes", 2**64 + 2**20), ("key_bits", 2**32 + 64),
                         ("device", 2**31), ("device", -2**31 - 1), ("hash_seed", 2**64),
                         ("unified_index_rows", -1), ("prefetch_depth", 2**32),
                         ("capacity_bytes", -1)):
            self.raises(lambda: emc.Cache(s, backend="host", **{field: v}), field)
        c = emc.Cache(s, backend="host", capacity_bytes=np.uint64(1 << 20), hash_seed=2**64 - 1)
        self.assertEqual((c.config["capacity_bytes"], c.config["hash_seed"]),
                         (1 << 20, 2**64 - 1))
        c.close()

    def test_group_integers(self):
        name = f"/emct-pyint-{os.getpid()}"
        sh = emc.Store.create_shared(name, [emc.Table("a", rows=10, dim=4)])
        try:
            self.raises(lambda: emc.Group(sh, 2**32, 1, timeout_ms=1000), "rank")
            self.raises(lambda: emc.Group(sh, 0, 2**32 + 1, timeout_ms=1000), "n_ranks")
            self.raises(lambda: emc.Group(sh, 0, 1, timeout_ms=2**32 + 5), "timeout_ms")
            self.raises(lambda: emc.Group(sh, 0.0, 1), "rank")
        finally:
            sh.close()
            emc.Store.unlink(name)

    def test_non_integers(self):
        s, ids = self.store, np.arange(3, dtype=np.uint64)
        self.raises(lambda: s.read(1.0, ids), "table")
        self.raises(lambda: s.read("0", ids), "table")
        self.raises(lambda: s.fill_uniform(1.5, 0.0, 1.0, seed=1), "table")
        self.raises(lambda: s.fill_uniform(0, "lo", 1.0, seed=1), "lo")
        self.raises(lambda: s.fill_uniform(0, 0.0, None, seed=1), "hi")
        self.raises(lambda: s.fill_uniform(0, 0.0, 1.0, seed=1.5), "seed")
        self.raises(lambda: s.fill_uniform(True, 0.0, 1.0, seed=1), "table")
        self.raises(lambda: emc.Table("w", rows=10, dim=4, dtype="bogus"), "dtype")
        self.raises(lambda: emc.Table("w", rows=10.0, dim=4), "rows")
        self.raises(lambda: emc.Table("w", rows=10, dim=4, kind=["dense"]), "kind")
        self.raises(lambda: emc.Cache(s, backend="host", capacity_bytes=1.5), "capacity_bytes")
        self.raises(lambda: emc.Cache(s, backend="host", evict_high="x"), "evict_high")
        self.raises(lambda: emc.Cache(s, backend=["host"]), "backend")


class T17Strings(unittest.TestCase):
    """A path or a name with an embedded NUL raises EmcError (EMC_EINVAL): ctypes passed the
    bytes before the NUL, so save("/x.emc\0y") wrote /x.emc and a table "user\0tag" was
    named "user"."""

    def raises(self, fn):
        with self.assertRaises(emc.EmcError) as cm:
            fn()
        self.assertEqual(cm.exception.status, emc.EMC_EINVAL, str(cm.exception))
        self.assertIn("embedded NUL", cm.exception.detail)

    def test_embedded_nul(self):
        import tempfile
        emc.load(LIB)
        with tempfile.TemporaryDirectory() as d:
            cut = os.path.join(d, "x.emc")
            store = emc.Store([emc.Table("a", rows=10, dim=4)])
            try:
                self.raises(lambda: store.save(cut + "\0y"))
                self.raises(lambda: store.save(os.fsencode(cut) + b"\0y"))
                self.assertFalse(os.path.exists(cut), "saved under the cut path")
                store.save(cut)
                self.raises(lambda: emc.Store.open(cut + "\0y"))
                name = f"/emct-pynul-{os.getpid()}"
                self.raises(lambda: emc.Store.open_shared(cut, name + "\0z"))
                self.raises(lambda: emc.Store.open_shared(cut + "\0y", name))
            finally:
                store.close()
        self.raises(lambda: emc.Table("user\0tag", rows=10, dim=4))
        t = emc.Table("user", rows=10, dim=4)
        t.name = "user\0tag"
        self.raises(lambda: emc.Store([t]))
        name = f"/emct-pynul-{os.getpid()}"
        self.raises(lambda: emc.Store.create_shared(name + "\0z", [emc.Table("a", rows=10, dim=4)]))
        self.raises(lambda: emc.Store.attach(name + "\0z"))
        self.raises(lambda: emc.Store.unlink(name + "\0z"))


class T14TrainExample(unittest.TestCase):
    def test_runs_and_learns(self):
        script = os.path.join(PYDIR, "train_example.py")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "EMC_LIB": LIB}
        r = subprocess.run([sys.executable, script, "--steps", "200"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("train_example: OK", r.stdout)
        print("\n" + r.stdout, file=sys.stderr, end="")


if __name__ == "__main__":
    if LIB is None:
        sys.exit("usage: test_python.py LIBEMBCACHE_SO [PYTHON_DIR]")
    unittest.main(verbosity=2)
