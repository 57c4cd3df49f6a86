"""Group: the training group of a shared store (emc_group_join / apply_gradients / leave)."""

import ctypes

from ._capi import _check, _fail, _fn, _int
from ._handles import _Owner, _in_flight, _live
from .optimizer import Optimizer
from .cache import Cache


class Group(_Owner):
    """emc_group_join / emc_group_apply_gradients / emc_group_leave: the training group of a
    shared store (seed document D). Each of n_ranks trainers (processes, or threads: the calls
    release the GIL) joins with its rank and calls apply_gradients once per step with its own
    cache over the store and its own batch; the call returns when the merged update of every
    rank is applied once to the shared rows (see embcache.h, "training groups").
    EmcError with status EMC_ETIMEDOUT when a rank died, left or did not arrive within
    timeout_ms: the group is then broken; every rank leaves, and a new Group may form.
    leave() waits for a step another thread has in flight on the group; later steps raise
    EmcError ("the group is closed")."""

    _what = "group"

    def __init__(self, store, rank, n_ranks, timeout_ms=10000):
        self._init_owner()
        rank = _int("emc_group_join", "rank", rank, "uint32")
        n_ranks = _int("emc_group_join", "n_ranks", n_ranks, "uint32")
        timeout_ms = _int("emc_group_join", "timeout_ms", timeout_ms, "uint32")
        self.store = store
        with store._call("emc_group_join") as sh:
            _check(_fn("emc_group_join")(sh, rank, n_ranks, timeout_ms, ctypes.byref(self._h)),
                   "emc_group_join")
            store._add_user()
        _live("group", 1)
        self.rank, self.n_ranks = rank, n_ranks

    @_in_flight("emc_group_apply_gradients")
    def apply_gradients(self, cache, ids, offsets, grads, optimizer):
        """One collective step (arguments as Cache.apply_gradients; cache: this rank's Cache
        over the group's Store)."""
        func = "emc_group_apply_gradients"
        if not isinstance(cache, Cache):
            _fail(func, f"cache: need an embcache.Cache, got {type(cache).__name__}")
        if not isinstance(optimizer, Optimizer):
            _fail(func, f"optimizer: need an embcache.Optimizer, got {type(optimizer).__name__}")
        opt = optimizer._as_c(func)
        o = cache._offsets(func, offsets)
        s = cache._stream(func, None, ids, grads)
        b = cache._ids(func, ids, o, s)
        g = cache._grads(func, grads, o, s)
        with cache._call(func) as ch:
            _check(_fn(func)(self._h, ch, b.ptr, o.ctypes.data, g.ptr, ctypes.byref(opt), s),
                   func)

    def leave(self):
        """emc_group_leave (the others' later steps fail with EMC_ETIMEDOUT)."""
        h = self._closing_handle()
        if h is None:
            return
        try:
            _check(_fn("emc_group_leave")(h), "emc_group_leave")
        finally:
            self._closed(True)  # g is freed even when the call fails
            _live("group", -1)
            self.store._drop_user()

    close = leave

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def __del__(self):
        try:
            self.leave()
        except Exception:
            pass
