"""Cache: emc_cache over a Store (lookup, insert, flush, stats, and the training calls:
prefetch, apply_gradients, dedup), and device_count."""

import ctypes

import numpy as np

from ._capi import (
    _ADMISSIONS, _BACKENDS, _CTYPE_NAMES, _CacheConfig, _STAT_FIELDS, _Stats, _check, _fail,
    _fn, _int, _real, library)
from ._arrays import _KDL_CPU, _Mem, _adapt, _cuda_array_interface, _stream_handle
from ._handles import _Owner, _in_flight, _live
from .optimizer import Optimizer


class Cache(_Owner):
    """emc_cache over a Store. Keyword arguments set emc_cache_config fields: backend
    ("auto", "host", "cuda"), device, capacity_bytes, evict_high, evict_low, key_bits,
    unified_index_rows, hash_seed, prefetch_depth, admission ("inline", "background",
    "auto") (defaults: the library's; admission "auto" resolves at creation, see .admission).

    Threads may share a Cache (the calls release the GIL; embcache.h says which calls may run
    concurrently). close() waits until no other thread has a call in flight on the cache, then
    destroys it; calls made after close() has begun raise EmcError ("the cache is closed")."""

    _what = "cache"

    def __init__(self, store, **config):
        self._init_owner()
        lib = library()
        cfg = _CacheConfig()
        lib.emc_cache_config_init(ctypes.byref(cfg))
        if cfg.struct_size != ctypes.sizeof(_CacheConfig):
            _fail("emc_cache_create", f"emc_cache_config is {cfg.struct_size} bytes in the "
                                      f"library, {ctypes.sizeof(_CacheConfig)} in this module")
        fields = dict(_CacheConfig._fields_)
        for k, v in config.items():
            if k == "backend":
                if not isinstance(v, str) or v not in _BACKENDS:
                    _fail("emc_cache_create", f"backend {v!r}: use one of {list(_BACKENDS)}")
                v = _BACKENDS[v]
            elif k == "admission":
                if not isinstance(v, str) or v not in _ADMISSIONS:
                    _fail("emc_cache_create", f"admission {v!r}: use one of {list(_ADMISSIONS)}")
                v = _ADMISSIONS[v]
            elif k not in fields or k in ("struct_size", "reserved_"):
                _fail("emc_cache_create", f"unknown configuration field {k!r}")
            elif fields[k] is ctypes.c_float:
                v = _real("emc_cache_create", k, v)
            else:
                v = _int("emc_cache_create", k, v, _CTYPE_NAMES[fields[k]])
            setattr(cfg, k, v)
        self.store = store
        with store._call("emc_cache_create") as sh:
            _check(lib.emc_cache_create(sh, ctypes.byref(cfg), ctypes.byref(self._h)),
                   "emc_cache_create")
            store._add_user()  # the cache keeps the store alive, not the reverse
        _live("cache", 1)
        self._backend = {1: "host", 2: "cuda"}[lib.emc_cache_backend(self._h)]
        self.config = {name: getattr(cfg, name) for name, _ in _CacheConfig._fields_}
        t = store.tables
        self._uniform = all(x.dim == t[0].dim and x.dtype == t[0].dtype for x in t)
        self._same_dim = all(x.dim == t[0].dim for x in t)
        self._dtype = t[0].dtype if all(x.dtype == t[0].dtype for x in t) else None

    @property
    def backend(self):
        """"host" or "cuda" (AUTO resolved)."""
        self._handle("emc_cache_backend")
        return self._backend

    @property
    def admission(self):
        """"inline" or "background" (EMC_ADMISSION_AUTO resolved; a CUDA cache: "background")."""
        with self._call("emc_cache_admission") as h:
            return {0: "inline", 1: "background"}[library().emc_cache_admission(h)]

    def _handle(self, func):
        if not self._h:
            _fail(func, "the cache is closed")
        return self._h

    # ---- helpers for the calls (and for the ones still to come)
    def _offsets(self, func, offsets):
        """Host uint64 copy of offsets, length checked (the C API cannot see it)."""
        if _cuda_array_interface(offsets, func, "offsets") is not None:
            _fail(func, "offsets: pass host offsets (e.g. offsets.get() or offsets.cpu()): the "
                        "binding checks their length and last value before the call")
        o = np.asarray(offsets)
        if o.ndim != 1 or o.dtype.kind not in "iu":
            _fail(func, f"offsets: need a 1-D integer sequence, got {o.dtype} {o.shape}")
        n_tables = len(self.store.tables)
        if o.shape[0] != n_tables + 1:
            _fail(func, f"offsets: {o.shape[0]} entries; the store has {n_tables} tables, so "
                        f"offsets needs n_tables + 1 = {n_tables + 1}")
        if o.dtype.kind == "i" and (o < 0).any():
            _fail(func, "offsets: negative entry")
        return np.ascontiguousarray(o, dtype=np.uint64)

    def _ids(self, func, ids, offsets, stream):
        b, _ = _adapt(ids, func, "ids", stream)
        if b.dtype not in (np.uint64, np.int64):  # int64: PyTorch's index type, same 64 bits
            _fail(func, f"ids: dtype {b.dtype}, need uint64 or int64 (ids.astype(np.uint64))")
        if len(b.shape) != 1:
            _fail(func, f"ids: shape {b.shape}, need a 1-D array")
        if b.shape[0] != int(offsets[-1]):
            _fail(func, f"ids: {b.shape[0]} elements but offsets[-1] = {int(offsets[-1])}")
        self._placed(func, "ids", b)
        return b

    def _placed(self, func, name, b):
        if b.device and self.backend != "cuda":
            _fail(func, f"{name}: device memory on the host backend; pass host (NumPy) arrays")

    def batch_bytes(self, offsets, _func="emc_batch_bytes"):
        """emc_batch_bytes: bytes of a batch's packed row buffer. (_func: the call to name in
        an error, when a call such as lookup asks.)"""
        o = self._offsets(_func, offsets)
        n = ctypes.c_size_t()
        with self.store._call(_func) as sh:
            _check(library().emc_batch_bytes(sh, o.ctypes.data, ctypes.byref(n)), _func)
        return n.value

    def _row_forms(self, offsets, func):
        """Accepted (shape, dtype) forms of a row buffer, preferred first (func: the call to
        name when the library refuses the offsets)."""
        n = int(offsets[-1])
        nbytes = self.batch_bytes(offsets, func)
        forms = []
        if self._uniform:
            forms.append(((n, self.store.tables[0].dim), self._dtype))
        if self._dtype is not None:
            forms.append(((nbytes // self._dtype.itemsize,), self._dtype))
        forms.append(((nbytes,), np.dtype(np.uint8)))
        return forms

    def _rows(self, func, name, arr, offsets, stream, writable):
        forms = self._row_forms(offsets, func)
        b, readonly = _adapt(arr, func, name, stream)
        if (b.shape, b.dtype) not in forms:
            _fail(func, f"{name}: {b.dtype} {b.shape}; need one of " +
                  ", ".join(f"{dt.name} {sh}" for sh, dt in forms))
        if writable and readonly:
            _fail(func, f"{name}: read-only array")
        self._placed(func, name, b)
        return b

    def _grad_forms(self, offsets):
        """Accepted (shape, dtype) forms of a gradient buffer: float32 whatever the tables'
        dtype, packed like a row buffer."""
        f32 = np.dtype(np.float32)
        elems = sum(int(offsets[t + 1] - offsets[t]) * tab.dim
                    for t, tab in enumerate(self.store.tables))
        forms = [((int(offsets[-1]), self.store.tables[0].dim), f32)] if self._same_dim else []
        return forms + [((elems,), f32)]

    def _grads(self, func, grads, offsets, stream):
        forms = self._grad_forms(offsets)
        b, _ = _adapt(grads, func, "grads", stream)  # only read: read-only arrays are fine
        if (b.shape, b.dtype) not in forms:
            _fail(func, f"grads: {b.dtype} {b.shape}; need one of " +
                  ", ".join(f"{dt.name} {sh}" for sh, dt in forms) +
                  " (float32 whatever the tables' dtype)")
        self._placed(func, "grads", b)
        return b

    def _where(self, func, where, n, stream):
        b, readonly = _adapt(where, func, "where", stream)
        if b.dtype != np.uint8 or b.shape != (n,) or readonly:
            _fail(func, f"where: need a writable uint8 ({n},) array, got {b.dtype} {b.shape}")
        self._placed(func, "where", b)
        return b

    def _stream(self, func, stream, *arrays):
        """The cudaStream_t of a call, decided before its arrays are adapted (DLPack producers
        are asked for it): the caller's, else the stream the first __cuda_array_interface__
        argument names (1 and 2, the legacy and per-thread default streams, are valid handles
        as they are), else the default stream (None). None on the host backend."""
        h = _stream_handle(stream)
        if self.backend != "cuda":
            if h:
                _fail(func, "stream: the host backend takes no stream")
            return None
        if h is None:
            for a in arrays:
                cai = _cuda_array_interface(a, func, "array")
                if cai and cai.get("stream"):
                    h = int(cai["stream"])
                    break
        return h or None

    def _alloc(self, like, shape, dtype, func="lookup"):
        """A new array beside `like` (NumPy, CuPy or PyTorch)."""
        mod = type(like).__module__.split(".")[0]
        if mod == "cupy":
            import cupy
            return cupy.empty(shape, dtype=dtype)
        if mod == "torch":
            import torch
            return torch.empty(shape, dtype=getattr(torch, dtype.name), device=like.device)
        cpu_dlpack = (not isinstance(like, np.ndarray) and hasattr(like, "__dlpack__") and
                      hasattr(like, "__dlpack_device__") and
                      like.__dlpack_device__()[0] == _KDL_CPU)
        if not isinstance(like, np.ndarray) and not cpu_dlpack and (
                _cuda_array_interface(like, "lookup", "ids") is not None or
                hasattr(like, "__dlpack__")):
            _fail(func, f"cannot allocate beside a {type(like).__name__}: " +
                  ("pass out=" if func == "lookup" else "pass NumPy, CuPy or PyTorch ids"))
        return np.empty(shape, dtype=dtype)

    # ---- the calls
    @_in_flight("emc_lookup")
    def lookup(self, ids, offsets, out=None, where=None, stream=None):
        """emc_lookup / emc_lookup_ex. Returns out (allocated beside ids when None), or
        (out, where) when `where` is given (True allocates a uint8 array)."""
        func = "emc_lookup_ex" if where is not None else "emc_lookup"
        h = self._handle(func)
        o = self._offsets(func, offsets)
        s = self._stream(func, stream, ids, out, where)
        b = self._ids(func, ids, o, s)
        if out is None:
            shape, dt = self._row_forms(o, func)[0]
            out = self._alloc(ids, shape, dt)
        r = self._rows(func, "out", out, o, s, writable=True)
        w = None
        if where is not None:
            if where is True:
                where = self._alloc(ids, (b.shape[0],), np.dtype(np.uint8))
            w = self._where(func, where, b.shape[0], s)
        if w is None:
            _check(library().emc_lookup(h, b.ptr, o.ctypes.data, r.ptr, s), func)
            return out
        _check(library().emc_lookup_ex(h, b.ptr, o.ctypes.data, r.ptr, w.ptr, s), func)
        return out, where

    @_in_flight("emc_insert")
    def insert(self, ids, offsets, rows, stream=None):
        """emc_insert: rows become the cached values of ids (dirty until written back)."""
        func = "emc_insert"
        h = self._handle(func)
        o = self._offsets(func, offsets)
        s = self._stream(func, stream, ids, rows)
        b = self._ids(func, ids, o, s)
        r = self._rows(func, "rows", rows, o, s, writable=False)
        _check(library().emc_insert(h, b.ptr, o.ctypes.data, r.ptr, s), func)

    # ---- training
    @_in_flight("emc_prefetch")
    def prefetch(self, ids, offsets, stream=None):
        """emc_prefetch: make every row of the batch resident and pin it through the next
        prefetch_depth prefetch calls (pins expire by themselves). A lookup of the batch
        afterwards is all hits for the pinned rows.

        Raises EmcCapacityError (an EmcError; .partial True) when the batch's rows do not all
        fit the pin budget (t2 * capacity_bytes, shared by the live prefetch window): that is
        a partial success: the rows that fit were pinned, the others stay unpinned and are read
        from the store when needed, so results stay correct. A trainer that only wants to know
        can catch it (`except emc.EmcCapacityError`) and carry on; stats()["pin_shortfall"]
        counts the rows. Other errors (EMC_EINVAL, EMC_ERANGE, ...) change nothing."""
        func = "emc_prefetch"
        h = self._handle(func)
        o = self._offsets(func, offsets)
        s = self._stream(func, stream, ids)
        b = self._ids(func, ids, o, s)
        _check(_fn(func)(h, b.ptr, o.ctypes.data, s), func)

    @_in_flight("emc_apply_gradients")
    def apply_gradients(self, ids, offsets, grads, optimizer, stream=None):
        """emc_apply_gradients: one optimizer step on the batch's rows inside the cache (they
        stay there, dirty, until evicted or flushed).

        grads      float32 (whatever the tables' dtype), packed like lookup's rows: (n, dim)
                   when every table has the same dim, else 1-D of sum(n_t * dim_t) elements
                   (Cache.split gives per-table views); the same memory space as lookup's out.
        optimizer  an Optimizer. Gradients of duplicate ids are merged (optimizer.merge).
        Raises EmcError (nothing changed): EMC_EINVAL for bad arrays or optimizer fields (and
        the library's detail for e.g. row-wise Adagrad with ids in a table without
        state="adagrad"),
        EMC_ERANGE (dense id out of range, hashed table full), EmcCapacityError (.partial
        False) when the batch's distinct rows alone exceed the cache: split the batch."""
        func = "emc_apply_gradients"
        h = self._handle(func)
        if not isinstance(optimizer, Optimizer):
            _fail(func, f"optimizer: need an embcache.Optimizer, got {type(optimizer).__name__}")
        opt = optimizer._as_c(func)
        o = self._offsets(func, offsets)
        s = self._stream(func, stream, ids, grads)
        b = self._ids(func, ids, o, s)
        g = self._grads(func, grads, o, s)
        _check(_fn(func)(h, b.ptr, o.ctypes.data, g.ptr, ctypes.byref(opt), s), func)

    @_in_flight("emc_dedup")
    def dedup(self, ids, offsets, stream=None):
        """emc_dedup: the distinct ids of each table of a batch. Returns
        (unique_ids, unique_offsets, inverse):
          unique_ids      (m,) uint64, m = unique_offsets[-1]: each table's distinct ids in
                          order of first occurrence, table by table (a batch of its own);
          unique_offsets  (n_tables + 1,) uint64 host array: that batch's offsets;
          inverse         (n,) uint32: unique_ids[inverse] == ids.
        Host backend: NumPy arrays. CUDA backend: unique_ids and inverse are allocated beside
        ids; unique_offsets is host memory (the library fills it before returning)."""
        func = "emc_dedup"
        h = self._handle(func)
        o = self._offsets(func, offsets)
        s = self._stream(func, stream, ids)
        b = self._ids(func, ids, o, s)
        n = b.shape[0]
        if self.backend == "cuda":
            uids = self._alloc(ids, (n,), np.dtype(np.uint64), func)
            inv = self._alloc(ids, (n,), np.dtype(np.uint32), func)
        else:
            uids, inv = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint32)
        uoff = np.zeros(len(self.store.tables) + 1, dtype=np.uint64)
        u, _ = _adapt(uids, func, "unique_ids", s)
        i, _ = _adapt(inv, func, "inverse", s)
        _check(_fn(func)(h, b.ptr, o.ctypes.data, u.ptr, uoff.ctypes.data, i.ptr, s), func)
        return uids[:int(uoff[-1])], uoff, inv

    @_in_flight("emc_flush")
    def flush(self, stream=None):
        """emc_flush: write every dirty row back to the store (waits)."""
        _check(library().emc_flush(self._handle("emc_flush"), self._stream("emc_flush", stream)),
               "emc_flush")

    @_in_flight("emc_get_stats")
    def stats(self):
        """emc_get_stats as a dict."""
        st = _Stats()
        _check(library().emc_get_stats(self._handle("emc_get_stats"), ctypes.byref(st)),
               "emc_get_stats")
        return {n: getattr(st, n) for n in _STAT_FIELDS}

    def split(self, rows, offsets):
        """Per-table (n_t, dim_t) views of a host row buffer (any accepted form), or of a
        float32 gradient buffer (apply_gradients' grads; float32 views whatever the dtypes)."""
        o = self._offsets("split", offsets)
        forms = self._row_forms(o, "split")
        r, _ = _adapt(rows, "split", "rows", None)
        if (r.shape, r.dtype) in forms:
            dtypes = [tab.dtype for tab in self.store.tables]
        elif (r.shape, r.dtype) in self._grad_forms(o):
            dtypes = [np.dtype(np.float32)] * len(self.store.tables)
        else:
            both = list(dict.fromkeys(forms + self._grad_forms(o)))
            _fail("split", f"rows: {r.dtype} {r.shape}; need one of " +
                  ", ".join(f"{dt.name} {sh}" for sh, dt in both))
        if r.device:
            _fail("split", "rows: host arrays only")
        if isinstance(rows, np.ndarray) or hasattr(rows, "__array_interface__"):
            flat = np.asarray(rows).reshape(-1).view(np.uint8)
        else:  # a DLPack producer: views of the memory _adapt found (np.asarray could make a
            # copy, or an object array, and writes to the views would be lost)
            flat = np.asarray(_Mem(r))
        views, at = [], 0
        for t, tab in enumerate(self.store.tables):
            n = int(o[t + 1] - o[t])
            nb = n * tab.dim * dtypes[t].itemsize
            views.append(flat[at:at + nb].view(dtypes[t]).reshape(n, tab.dim))
            at += nb
        return views

    def close(self):
        """emc_cache_destroy: write dirty rows back, free the cache, detach it. Waits until no
        other thread has a call in flight on the cache; later calls raise EmcError."""
        h = self._closing_handle()
        if h is None:
            return
        destroyed = False
        try:
            _check(library().emc_cache_destroy(h), "emc_cache_destroy")
            destroyed = True
            _live("cache", -1)
        finally:
            self._closed(destroyed)
        self.store._drop_user()  # destroys the store if it was finalized already

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def device_count():
    """CUDA devices this build of the library can use; EmcError (EMC_ENODEV with the reason,
    e.g. no NVIDIA driver, or EMC_EUNSUPPORTED without CUDA) when none."""
    lib = library()
    if not hasattr(lib, "emc_device_count"):
        _fail("emc_device_count", "this library has no emc_device_count")
    n = ctypes.c_int()
    _check(lib.emc_device_count(ctypes.byref(n)), "emc_device_count")
    return n.value
