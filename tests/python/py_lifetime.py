"""Handles and Python's threads and garbage collector (close() against calls in flight,
fork, reference cycles), integer and string arguments."""
import ctypes
import gc
import os
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

from py_common import emc, LIB, PYDIR


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
