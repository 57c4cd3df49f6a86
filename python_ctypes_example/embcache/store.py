"""Table and Store: emc_store (create, open, shared stores, fill, read, write, save)."""

import ctypes

import numpy as np

from ._capi import (
    EMC_ERANGE, _DTYPES, _DTYPE_CODES, _KINDS, _STATES, _TableDesc, _check, _cstr, _fail,
    _index, _int, _real, library)
from ._arrays import _adapt
from ._handles import _Owner, _live


class Table:
    """A table's description. kind: "dense" (ids in [0, rows)) or "hashed" (any uint64 id, at
    most `rows` distinct); dtype: "f32" / np.float32 or "f16" / np.float16; state: "none" or
    "adagrad" (a row-wise Adagrad accumulator beside every row: emc_row_state)."""

    def __init__(self, name, rows, dim, dtype="f32", kind="dense", state="none"):
        if not isinstance(kind, str) or kind not in _KINDS:
            _fail("Table", f"kind {kind!r}: use 'dense' or 'hashed'")
        if not isinstance(state, str) or state not in _STATES:
            _fail("Table", f"state {state!r}: use one of {list(_STATES)}")
        dt = None
        if isinstance(dtype, str):
            dt = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16)}.get(dtype, None)
        if dt is None:
            try:
                dt = np.dtype(dtype)
            except (TypeError, ValueError):
                dt = None
        if dt not in _DTYPE_CODES:
            _fail("Table", f"dtype {dtype!r}: use float32 ('f32') or float16 ('f16')")
        if name is not None:
            _cstr("Table", "name", name)
        self.name, self.dtype, self.kind, self.state = name, dt, kind, state
        self.rows = _int("Table", "rows", rows, "uint64")
        self.dim = _int("Table", "dim", dim, "uint32")

    @property
    def row_bytes(self):
        return self.dim * self.dtype.itemsize

    def __repr__(self):
        return (f"Table({self.name!r}, rows={self.rows}, dim={self.dim}, "
                f"dtype={self.dtype.name}, kind={self.kind!r}, state={self.state!r})")


class Store(_Owner):
    """emc_store: every row of every table, in host memory. Store(tables) creates one;
    Store.open(path) opens a saved one. close() (or the context manager) frees it.
    Threads may share a Store: close() waits for the calls other threads have in flight on it,
    and later calls raise EmcError ("the store is closed")."""

    _what = "store"

    def __init__(self, tables=None, _handle=None, _shared_name=None):
        lib = library()
        self._init_owner()
        # Its open Caches and Groups, counted (they keep the store alive, not the reverse).
        # A count, not a WeakSet: the collector clears weak references before it runs the
        # finalizers of a cycle, and the store must not be destroyed before its caches.
        self._users = 0
        self._pending = False  # finalized with users open: the last of them destroys it
        if _handle is not None:
            self._h = _handle
        else:
            tables = list(tables)
            descs = (_TableDesc * len(tables))()
            func = "emc_store_create" if _shared_name is None else "emc_store_create_shared"
            names = [None if getattr(t, "name", None) is None else
                     _cstr(func, f"tables[{i}].name", t.name) for i, t in enumerate(tables)]
            shared = None if _shared_name is None else _cstr(func, "name", _shared_name)
            for i, t in enumerate(tables):
                if not isinstance(t, Table):
                    _fail(func, f"tables[{i}]: need an embcache.Table, got {type(t).__name__}")
                # checked again: the fields may have been reassigned since Table() checked them
                descs[i] = _TableDesc(names[i], _KINDS[t.kind],
                                      _int(func, f"tables[{i}].rows", t.rows, "uint64"),
                                      _int(func, f"tables[{i}].dim", t.dim, "uint32"),
                                      _DTYPE_CODES[t.dtype], _STATES[t.state])
            if _shared_name is None:
                _check(lib.emc_store_create(descs, len(tables), ctypes.byref(self._h)),
                       "emc_store_create")
            else:
                _check(lib.emc_store_create_shared(shared, descs, len(tables),
                                                   ctypes.byref(self._h)),
                       "emc_store_create_shared")
        _live("store", 1)
        self.tables = []
        for i in range(lib.emc_store_n_tables(self._h)):
            d = _TableDesc()
            _check(lib.emc_store_table(self._h, i, ctypes.byref(d)), "emc_store_table")
            self.tables.append(Table(d.name.decode(), d.rows, d.dim, _DTYPES[d.dtype],
                                     "hashed" if d.kind == 1 else "dense",
                                     {v: k for k, v in _STATES.items()}[d.state]))

    @classmethod
    def open(cls, path):
        h = ctypes.c_void_p()
        _check(library().emc_store_open(_cstr("emc_store_open", "path", path, path=True),
                                        ctypes.byref(h)), "emc_store_open")
        return cls(_handle=h)

    @classmethod
    def create_shared(cls, name, tables):
        """emc_store_create_shared: the tables' rows in POSIX shared memory `name`
        ("/embcache-..."), one copy per machine; other processes Store.attach(name)."""
        return cls(tables, _shared_name=name)

    @classmethod
    def attach(cls, name):
        """emc_store_attach: map the shared store `name` another process created."""
        h = ctypes.c_void_p()
        _check(library().emc_store_attach(_cstr("emc_store_attach", "name", name),
                                          ctypes.byref(h)), "emc_store_attach")
        return cls(_handle=h)

    @classmethod
    def open_shared(cls, path, name):
        """emc_store_open_shared: a store file loaded into the new shared store `name`."""
        h = ctypes.c_void_p()
        func = "emc_store_open_shared"
        _check(library().emc_store_open_shared(_cstr(func, "path", path, path=True),
                                               _cstr(func, "name", name), ctypes.byref(h)), func)
        return cls(_handle=h)

    @staticmethod
    def unlink(name):
        """emc_store_unlink: remove the shared store's name (mappings in use stay)."""
        _check(library().emc_store_unlink(_cstr("emc_store_unlink", "name", name)),
               "emc_store_unlink")

    def save(self, path):
        p = _cstr("emc_store_save", "path", path, path=True)
        with self._call("emc_store_save") as h:
            _check(library().emc_store_save(h, p), "emc_store_save")

    def fill_uniform(self, table, lo, hi, seed):
        func = "emc_store_fill_uniform"
        table = self._table_index(func, table)
        lo, hi = _real(func, "lo", lo), _real(func, "hi", hi)
        seed = _int(func, "seed", seed, "uint64")
        with self._call(func) as h:
            _check(library().emc_store_fill_uniform(h, table, lo, hi, seed), func)

    def _table_index(self, func, table):
        """A table index: EMC_EINVAL when not an integer, EMC_ERANGE (as the library) when not
        one of the store's tables."""
        table = _index(func, "table", table)
        if not 0 <= table < len(self.tables):
            _fail(func, f"table {table}: the store has {len(self.tables)}", EMC_ERANGE)
        return table

    def _table_ids(self, func, table, ids):
        table = self._table_index(func, table)
        b, _ = _adapt(ids, func, "ids", None)
        if b.device or b.dtype not in (np.uint64, np.int64) or len(b.shape) != 1:
            _fail(func, f"ids: need a 1-D uint64 (or int64) host array, got {b.dtype} {b.shape}"
                        f"{' on the device' if b.device else ''}")
        return table, b

    def write(self, table, ids, rows):
        """emc_store_write: rows (n, dim) of the table's dtype, host memory."""
        func = "emc_store_write"
        table, b = self._table_ids(func, table, ids)
        t = self.tables[table]
        r, _ = _adapt(rows, func, "rows", None)
        if r.device or r.dtype != t.dtype or r.shape != (b.shape[0], t.dim):
            _fail(func, f"rows: need ({b.shape[0]}, {t.dim}) {t.dtype.name} in host memory, "
                        f"got {r.dtype} {r.shape}")
        with self._call(func) as h:
            _check(library().emc_store_write(h, table, b.ptr, b.shape[0], r.ptr), func)

    def read(self, table, ids, out=None):
        """emc_store_read: returns (n, dim) rows of the table's dtype (absent hashed ids: zeros)."""
        func = "emc_store_read"
        table, b = self._table_ids(func, table, ids)
        t = self.tables[table]
        if out is None:
            out = np.empty((b.shape[0], t.dim), dtype=t.dtype)
        o, ro = _adapt(out, func, "out", None)
        if o.device or ro or o.dtype != t.dtype or o.shape != (b.shape[0], t.dim):
            _fail(func, f"out: need a writable ({b.shape[0]}, {t.dim}) {t.dtype.name} host "
                        f"array, got {o.dtype} {o.shape}{' read-only' if ro else ''}")
        with self._call(func) as h:
            _check(library().emc_store_read(h, table, b.ptr, b.shape[0], o.ptr), func)
        return out

    def read_state(self, table, ids, out=None):
        """emc_store_read_state: the optimizer state of each id's row, (n,) float32 (row-wise
        Adagrad: the stored sum of mean squared gradients; absent hashed ids read 0). A table
        without state raises the library's EMC_EINVAL. With a cache attached, flush it first."""
        func = "emc_store_read_state"
        table, b = self._table_ids(func, table, ids)
        if out is None:
            out = np.empty(b.shape[0], dtype=np.float32)
        o, ro = _adapt(out, func, "out", None)
        if o.device or ro or o.dtype != np.float32 or o.shape != (b.shape[0],):
            _fail(func, f"out: need a writable ({b.shape[0]},) float32 host array, got "
                        f"{o.dtype} {o.shape}{' read-only' if ro else ''}")
        with self._call(func) as h:
            _check(library().emc_store_read_state(h, table, b.ptr, b.shape[0], o.ptr), func)
        return out

    def close(self):
        """Free the store (close its caches and groups first: the library refuses otherwise).
        Waits for the calls other threads have in flight on the store."""
        self._close(finalizing=False)

    def _close(self, finalizing):
        """close(); from a finalizer (finalizing) a store whose caches or groups are still open
        (a reference cycle: they are being finalized too, in any order) keeps its handle and
        is destroyed by the last of them to close. A handle the library would refuse to
        destroy is never dropped."""
        lock = getattr(self, "_lock", None)
        if not finalizing and lock is not None:
            with lock:  # refused at once: other threads' calls go on meanwhile
                if self._h and self._users:
                    _fail("emc_store_destroy",
                          "a cache is attached (or a group joined): close it first")
        h = self._closing_handle()
        if h is None:
            return
        destroyed = False
        try:
            with self._lock:
                if self._users:
                    if finalizing:
                        self._pending = True
                        return
                    _fail("emc_store_destroy",
                          "a cache is attached (or a group joined): close it first")
            library().emc_store_destroy(h)
            destroyed = True
            _live("store", -1)
        finally:
            self._closed(destroyed)

    def _add_user(self):
        """A cache or group was made over the store (called while in flight on it)."""
        with self._lock:
            self._users += 1

    def _drop_user(self):
        """A cache or group over the store was destroyed: destroy a pending store."""
        with self._lock:
            self._users -= 1
            last = self._pending and not self._users
        if last:
            self._close(finalizing=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._close(finalizing=True)
        except Exception:
            pass
