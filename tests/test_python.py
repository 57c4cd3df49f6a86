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

This file is the runner and holds the first test; the others are modules of tests/python/,
run in this order (their classes keep the names T02..T17 the suite has always had):
  py_lookups.py      T02-T03d  lookups, row-buffer forms, background admission, shared store,
                               training group
  py_arrays.py       T04-T07   bad arrays, DLPack, device_count, the CUDA plumbing
  py_training.py     T08-T11   prefetch, SGD bitwise, Adagrad, dedup
  py_train_calls.py  T12-T14   the training calls' bad inputs and plumbing, train_example.py
  py_lifetime.py     T15-T17   handles against threads, fork and the collector; integer and
                               string arguments
  py_common.py                 what they share (paths, stores, caches, batches)
"""
import ctypes
import os
import sys
import unittest

LIB = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
PYDIR = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                     "python_ctypes_example"))
sys.path.insert(0, PYDIR)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
del sys.argv[1:]  # unittest must not see them

import embcache as emc  # noqa: E402

import py_common  # noqa: E402

py_common.LIB, py_common.PYDIR = LIB, PYDIR  # before the test modules import them

MODULES = ("py_lookups", "py_arrays", "py_training", "py_train_calls", "py_lifetime")


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


def suite():
    loader = unittest.TestLoader()
    s = unittest.TestSuite([loader.loadTestsFromTestCase(T01FreshProcessLoad)])
    for name in MODULES:
        s.addTests(loader.loadTestsFromModule(__import__(name)))
    return s


if __name__ == "__main__":
    if LIB is None:
        sys.exit("usage: test_python.py LIBEMBCACHE_SO [PYTHON_DIR]")
    result = unittest.TextTestRunner(verbosity=2).run(suite())
    sys.exit(0 if result.wasSuccessful() else 1)
