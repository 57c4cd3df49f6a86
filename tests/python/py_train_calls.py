"""The training calls' bad inputs, their CUDA plumbing against the proxy, and
train_example.py."""
import ctypes
import os
import subprocess
import sys
import unittest

import numpy as np

from py_common import emc, LIB, PYDIR, inline_cache
import py_arrays  # (not its classes by name: the runner would run them twice)


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

    raises = py_arrays.T04BadArrays.raises

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
    Cai, DLDevice = py_arrays.T07CudaPlumbing.Cai, py_arrays.T07CudaPlumbing.DLDevice

    class Proxy(py_arrays.T07CudaPlumbing.Proxy):
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


class T14TrainExample(unittest.TestCase):
    def test_runs_and_learns(self):
        script = os.path.join(PYDIR, "train_example.py")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "EMC_LIB": LIB}
        r = subprocess.run([sys.executable, script, "--steps", "200"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("train_example: OK", r.stdout)
        print("\n" + r.stdout, file=sys.stderr, end="")
