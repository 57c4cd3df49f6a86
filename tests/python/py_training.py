"""Training on the host backend: prefetch pins, SGD bitwise against a NumPy reference,
row-wise Adagrad and its state, dedup's invariants."""
import unittest

import numpy as np

from py_common import emc, LIB, inline_cache, make_batch, make_store


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
