"""The C API: mirrors of include/embcache.h (constants, structs, prototypes), loading
libembcache.so, EmcError, and the argument checks every call makes before it reaches C."""

import ctypes
import ctypes.util
import operator
import os

import numpy as np


# Mirrors of include/embcache.h. C enums are int-sized.
EMC_OK, EMC_EINVAL, EMC_ERANGE, EMC_EIO, EMC_EUNSUPPORTED, EMC_ECAPACITY = 0, 1, 7, 8, 10, 11
EMC_ETIMEDOUT = 12
_DTYPES = {0: np.dtype(np.float32), 1: np.dtype(np.float16)}   # emc_dtype -> NumPy
_DTYPE_CODES = {v: k for k, v in _DTYPES.items()}
_KINDS = {"dense": 0, "hashed": 1}
_BACKENDS = {"auto": 0, "host": 1, "cuda": 2}
_ADMISSIONS = {"inline": 0, "background": 1, "auto": 2}
_STATES = {"none": 0, "adagrad": 1}                              # emc_row_state
_OPT_KINDS = {"sgd": 0, "rowwise_adagrad": 1}                    # emc_optimizer_kind
_MERGES = {"sum": 0, "mean": 1}                                  # emc_grad_merge
WHERE_CACHE, WHERE_STORE, WHERE_ABSENT = 0, 1, 2

_c_u64p = ctypes.POINTER(ctypes.c_uint64)


class _TableDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("rows", ctypes.c_uint64),
                ("dim", ctypes.c_uint32), ("dtype", ctypes.c_int), ("state", ctypes.c_int)]


class _CacheConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("backend", ctypes.c_int),
                ("device", ctypes.c_int), ("capacity_bytes", ctypes.c_size_t),
                ("evict_high", ctypes.c_float), ("evict_low", ctypes.c_float),
                ("key_bits", ctypes.c_uint32), ("unified_index_rows", ctypes.c_uint64),
                ("hash_seed", ctypes.c_uint64), ("prefetch_depth", ctypes.c_uint32),
                ("admission", ctypes.c_uint32), ("reserved_", ctypes.c_uint64)]


_STAT_FIELDS = ("lookups", "hits", "misses", "absent", "admissions", "admit_skipped", "inserts",
                "evictions", "writebacks", "evict_passes", "retries", "unified_hits",
                "rows_cached", "bytes_in_use", "bytes_reserved", "capacity_bytes",
                "index_bytes", "dirty_rows", "prefetched", "pinned_rows", "pinned_bytes",
                "pin_shortfall", "gradient_rows", "host_syncs")


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STAT_FIELDS]


class _Optimizer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("kind", ctypes.c_int), ("merge", ctypes.c_int),
                ("lr", ctypes.c_float), ("eps", ctypes.c_float),
                ("initial_accumulator", ctypes.c_float)]


_S, _P, _U32, _U64, _SZ = ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
_STR = ctypes.c_char_p
# name: (restype, argtypes). Pointers to arrays are passed as plain addresses (c_void_p), and
# cudaStream_t as c_void_p too.
_SIGNATURES = {
    "emc_version_string": (_STR, []),
    "emc_host_allocator": (_STR, []),
    "emc_status_name": (_STR, [_S]),
    "emc_last_error_detail": (_STR, []),
    "emc_store_create": (_S, [ctypes.POINTER(_TableDesc), _U32, ctypes.POINTER(_P)]),
    "emc_store_open": (_S, [_STR, ctypes.POINTER(_P)]),
    "emc_store_create_shared": (_S, [_STR, ctypes.POINTER(_TableDesc), _U32, ctypes.POINTER(_P)]),
    "emc_store_attach": (_S, [_STR, ctypes.POINTER(_P)]),
    "emc_store_open_shared": (_S, [_STR, _STR, ctypes.POINTER(_P)]),
    "emc_store_unlink": (_S, [_STR]),
    "emc_store_save": (_S, [_P, _STR]),
    "emc_store_destroy": (None, [_P]),
    "emc_store_n_tables": (_U32, [_P]),
    "emc_store_table": (_S, [_P, _U32, ctypes.POINTER(_TableDesc)]),
    "emc_store_fill_uniform": (_S, [_P, _U32, ctypes.c_float, ctypes.c_float, _U64]),
    "emc_store_write": (_S, [_P, _U32, _P, _SZ, _P]),
    "emc_store_read": (_S, [_P, _U32, _P, _SZ, _P]),
    "emc_cache_config_init": (None, [ctypes.POINTER(_CacheConfig)]),
    "emc_cache_create": (_S, [_P, ctypes.POINTER(_CacheConfig), ctypes.POINTER(_P)]),
    "emc_cache_destroy": (_S, [_P]),
    "emc_cache_backend": (_S, [_P]),
    "emc_cache_admission": (_S, [_P]),
    "emc_batch_bytes": (_S, [_P, _P, ctypes.POINTER(_SZ)]),
    "emc_lookup": (_S, [_P, _P, _P, _P, _P]),
    "emc_lookup_ex": (_S, [_P, _P, _P, _P, _P, _P]),
    "emc_insert": (_S, [_P, _P, _P, _P, _P]),
    "emc_flush": (_S, [_P, _P]),
    "emc_get_stats": (_S, [_P, ctypes.POINTER(_Stats)]),
    "emc_device_count": (_S, [ctypes.POINTER(ctypes.c_int)]),
    "emc_store_read_state": (_S, [_P, _U32, _P, _SZ, _P]),
    "emc_optimizer_init": (None, [ctypes.POINTER(_Optimizer)]),
    "emc_prefetch": (_S, [_P, _P, _P, _P]),
    "emc_apply_gradients": (_S, [_P, _P, _P, _P, ctypes.POINTER(_Optimizer), _P]),
    "emc_dedup": (_S, [_P, _P, _P, _P, _P, _P, _P]),
    "emc_group_join": (_S, [_P, _U32, _U32, _U32, ctypes.POINTER(_P)]),
    "emc_group_apply_gradients": (_S, [_P, _P, _P, _P, _P, ctypes.POINTER(_Optimizer), _P]),
    "emc_group_leave": (_S, [_P]),
}

_lib = None


def _candidates():
    env = os.environ.get("EMC_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # above the package
    paths = [os.path.normpath(os.path.join(here, "..", "build", "libembcache.so")),
             os.path.abspath(os.path.join("build", "libembcache.so"))]
    found = ctypes.util.find_library("embcache")  # an installed copy on the loader's path
    return paths + ([found] if found else [])


def load(path=None):
    """Load libembcache.so (once per process) and return the ctypes library.

    path: the library file; default $EMC_LIB, else build/libembcache.so two folders above
    this package (the source tree's), else build/libembcache.so under the current directory, else an installed
    libembcache.so the dynamic loader finds."""
    global _lib
    if _lib is not None:
        if path is not None and os.path.abspath(path) != _lib._name:
            raise EmcError(EMC_EINVAL, "load", f"already loaded from {_lib._name}")
        return _lib
    tried = [path] if path is not None else _candidates()
    for p in tried:
        if os.path.sep in p and not os.path.exists(p):
            continue
        lib = ctypes.CDLL(os.path.abspath(p) if os.path.sep in p else p)
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = res, args
        lib._name = os.path.abspath(p) if os.path.sep in p else p
        _lib = lib
        return lib
    raise EmcError(EMC_EINVAL, "load", "libembcache.so not found; looked at: " + ", ".join(tried)
                   + " (build it with `make build`, or set EMC_LIB)")


def library():
    """The loaded ctypes library (loading it if needed)."""
    return load() if _lib is None else _lib


def version():
    return library().emc_version_string().decode()


def host_allocator():
    """emc_host_allocator(): which allocator serves the library's big host allocations."""
    return library().emc_host_allocator().decode()


class EmcError(RuntimeError):
    """A failed embcache call: .status (int), .name, .func, .detail."""

    def __init__(self, status, func, detail):
        self.status, self.func, self.detail = int(status), func, detail
        try:
            self.name = library().emc_status_name(self.status).decode()
        except Exception:  # the library itself did not load
            self.name = f"status {self.status}"
        super().__init__(f"{func}: {self.name}: {detail}")


class EmcCapacityError(EmcError):
    """EMC_ECAPACITY: a batch's rows do not fit the cache.

    .partial is True when the call did its work except for the rows that did not fit (from
    Cache.prefetch: the fitting rows are pinned, the rest stay unpinned and lookups of them
    are still correct; on the CUDA backend an asynchronous prefetch's shortfall is raised by
    the next prefetch or flush). It is False when nothing changed (from apply_gradients: the
    batch's distinct rows take more than the cache ever holds; split the batch)."""

    def __init__(self, status, func, detail):
        super().__init__(status, func, detail)
        self.partial = func in ("emc_prefetch", "emc_flush")


def _check(status, func):
    """Raise EmcError (EmcCapacityError for EMC_ECAPACITY) with the library's detail unless
    status is EMC_OK."""
    if status != EMC_OK:
        cls = EmcCapacityError if status == EMC_ECAPACITY else EmcError
        raise cls(status, func, library().emc_last_error_detail().decode(errors="replace"))


def _fail(func, detail, status=EMC_EINVAL):
    raise EmcError(status, func, detail)


_INT_RANGES = {"uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
               "size_t": (0, 2**(8 * ctypes.sizeof(ctypes.c_size_t)) - 1),
               "int": (-2**(8 * ctypes.sizeof(ctypes.c_int) - 1),
                       2**(8 * ctypes.sizeof(ctypes.c_int) - 1) - 1)}
_CTYPE_NAMES = {ctypes.c_uint32: "uint32", ctypes.c_uint64: "uint64", ctypes.c_size_t: "size_t",
                ctypes.c_int: "int"}


def _index(func, name, v, what=""):
    """v as a Python int (operator.index: ints, NumPy integers, 0-d integer arrays, anything
    with __index__; not bool); EmcError (EMC_EINVAL) naming the argument otherwise."""
    try:
        if isinstance(v, (bool, np.bool_)):
            raise TypeError
        return operator.index(v)
    except TypeError:
        _fail(func, f"{name} = {v!r}: need an integer{what}, got {type(v).__name__}")


def _int(func, name, v, ctype):
    """v as a Python int that fits the C type ctype ("uint32", "uint64", "size_t", "int"):
    ctypes would keep its low bits silently. EmcError (EMC_EINVAL) naming the argument for a
    value out of range or not an integer (float, bool, str...)."""
    v = _index(func, name, v, f" ({ctype})")
    lo, hi = _INT_RANGES[ctype]
    if not lo <= v <= hi:
        _fail(func, f"{name} = {v}: out of range for {ctype} [{lo}, {hi}]")
    return v


def _real(func, name, v):
    """v as a Python float (for a C float or double); EmcError (EMC_EINVAL) otherwise."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        _fail(func, f"{name} = {v!r}: need a real number, got {type(v).__name__}")
    try:
        return float(v)
    except OverflowError:
        _fail(func, f"{name} = {v}: too large for a float")


def _cstr(func, name, v, path=False):
    """v as the bytes of a C string (a path: os.fsencode; a name: str, UTF-8). ctypes would
    pass only the bytes before an embedded NUL: that raises EmcError (EMC_EINVAL)."""
    try:
        b = os.fsencode(v) if path else str(v).encode()
    except (TypeError, UnicodeError) as e:
        _fail(func, f"{name} {v!r}: not a usable {'path' if path else 'name'} ({e})")
    if b"\0" in b:
        _fail(func, f"{name} {v!r}: embedded NUL")
    return b


def _fn(name):
    """The library's function `name`; EmcError (EMC_EUNSUPPORTED) when this libembcache.so is
    older than the call."""
    fn = getattr(library(), name, None)
    if fn is None:
        _fail(name, f"this libembcache.so ({library()._name}) has no {name}", EMC_EUNSUPPORTED)
    return fn
