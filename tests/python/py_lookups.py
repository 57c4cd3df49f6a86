"""Lookups against emc_store_read, the row-buffer forms, background admission, the shared
store and the training group through the binding."""
import os
import subprocess
import sys
import threading
import unittest

import numpy as np

from py_common import emc, LIB, PYDIR, inline_cache, make_batch, make_store


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
