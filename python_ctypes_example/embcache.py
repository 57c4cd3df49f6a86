"""embcache from Python: a small ctypes binding, arrays in and arrays out.

Nothing to compile beyond the library: ``ctypes.CDLL`` loads ``libembcache.so`` directly
(no LD_PRELOAD; see emc_host_allocator() in embcache.h for what allocates its rows then).

    import numpy as np
    import embcache as emc

    store = emc.Store([emc.Table("user", rows=100_000, dim=16),
                       emc.Table("tag", rows=50_000, dim=16, kind="hashed")])
    store.fill_uniform(0, -1.0, 1.0, seed=1)
    with emc.Cache(store, capacity_bytes=8 << 20, backend="host") as cache:
        ids = np.array([7, 42, 7, 1234], dtype=np.uint64)
        offsets = np.array([0, 3, 4], dtype=np.uint64)   # table 0: 3 ids, table 1: 1
        rows = cache.lookup(ids, offsets)                # (4, 16) float32
        cache.insert(ids, offsets, rows * 0.5)           # dirty until evicted / flushed
    store.close()

Arrays
  ids      1-D uint64, C-contiguous, offsets[-1] elements (grouped by table, see embcache.h);
           int64 is taken too, as the same 64 bits (PyTorch's and TorchRec's index type: a
           negative dense id is out of range, a negative hashed id is just another id).
  offsets  n_tables + 1 integers in host memory (a NumPy array or a sequence; converted to
           uint64). Contents (offsets[0] == 0, non-decreasing) are checked by the library.
  rows     (`out` of lookup, `rows` of insert) C-contiguous, one of
             (n, dim) of the tables' dtype    when every table has the same dim and dtype;
             1-D of the tables' dtype         when every table has the same dtype
                                              (sum over tables of n_t * dim_t elements);
             1-D uint8 of batch_bytes bytes   always.
           lookup allocates the first form that applies when `out` is None;
           Cache.split(rows, offsets) gives per-table (n_t, dim_t) NumPy views.
  where    1-D uint8 (n,) receiving WHERE_CACHE / WHERE_STORE / WHERE_ABSENT.
  Host memory: NumPy arrays, objects with __array_interface__, and CPU DLPack producers.
  CUDA backend only: device memory through __cuda_array_interface__ (CuPy, Numba, PyTorch
  CUDA tensors) or DLPack (__dlpack__ / __dlpack_device__). dtype, shape, contiguity and
  writability are checked before the call; nothing is copied or converted (except offsets).

Streams (CUDA backend)
  `stream` is a cudaStream_t handle as an int, or an object with .ptr (CuPy) or
  .cuda_stream (PyTorch), or None. None uses the stream a __cuda_array_interface__ argument
  names (its producer's stream: enqueueing there is what the interface asks of a consumer),
  else the legacy default stream. DLPack producers are asked (__dlpack__(stream=...)) to make
  their data ready on the stream the call uses. Calls return once enqueued; keep the arrays
  alive and synchronize the stream before reading `out`, as with any asynchronous CUDA call.

Training (see "training" in embcache.h; the CUDA backend does not have these calls yet)
  Table(..., state="adagrad") keeps a row-wise Adagrad accumulator beside every row;
  Cache(..., prefetch_depth=1) sets how many later prefetches a prefetch's pins outlive.
  A step: cache.prefetch(next_ids, next_offsets); rows = cache.lookup(ids, offsets);
  forward/backward; cache.apply_gradients(ids, offsets, grads, Optimizer(...)).
  grads    float32 always (whatever the tables' dtype), packed like `rows`: (n, dim) when every
           table has the same dim, or 1-D of sum(n_t * dim_t) elements; same memory rules.
  dedup    cache.dedup(ids, offsets) -> (unique_ids, unique_offsets, inverse).
  store.read_state(table, ids) reads the accumulators (cache.flush() first).
  EMC_ECAPACITY raises EmcCapacityError (an EmcError). From prefetch it is a partial success
  (.partial is True): the rows that fit the pin budget were pinned, the others are read from
  the store when needed, and lookups stay correct: a trainer may catch it and go on.

Errors
  Every failure raises EmcError (a RuntimeError) with .status (the emc_status value), .name
  ("EMC_EINVAL"), .detail and .func. Failures the library reports carry its
  emc_last_error_detail(); argument checks made here (dtype, shape, contiguity, lengths the C
  API cannot see, optimizer fields) raise EmcError with status EMC_EINVAL and a detail in the
  same style. EMC_ECAPACITY raises the subclass EmcCapacityError.

Adding a call: add its prototype to _SIGNATURES (missing symbols are skipped, so the module
still loads against an older library), then write a Cache method from the helpers every
method here uses: self._ids(), self._offsets(), self._rows(), self._where(), self._stream()
and _check(). See Cache.insert for a ten-line example.
"""

import ctypes
import ctypes.util
import functools
import math
import operator
import os
import sys
import threading
import weakref

import numpy as np

__all__ = ["EmcError", "EmcCapacityError", "Table", "Store", "Cache", "Optimizer", "Group", "load",
           "library", "version", "host_allocator", "device_count", "WHERE_CACHE",
           "WHERE_STORE", "WHERE_ABSENT"]

# --------------------------------------------------------------------------- the C API
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
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.normpath(os.path.join(here, "..", "build", "libembcache.so")),
             os.path.abspath(os.path.join("build", "libembcache.so"))]
    found = ctypes.util.find_library("embcache")  # an installed copy on the loader's path
    return paths + ([found] if found else [])


def load(path=None):
    """Load libembcache.so (once per process) and return the ctypes library.

    path: the library file; default $EMC_LIB, else ../build/libembcache.so next to this
    module, else build/libembcache.so under the current directory, else an installed
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


# --------------------------------------------------------------------------- array adapters
class _Buf:
    """A validated array argument: its address, where it lives, and what keeps it alive."""
    __slots__ = ("ptr", "device", "shape", "dtype", "keep")

    def __init__(self, ptr, device, shape, dtype, keep=None):
        self.ptr, self.device, self.shape, self.dtype = ptr, device, tuple(shape), dtype
        self.keep = keep


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    want = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != want:
            return False
        want *= n
    return True


# DLPack (dlpack.h, v0.x ABI: the "dltensor" capsule of DLManagedTensor).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DLDeleter)]
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
_DL_CODES = {0: "i", 1: "u", 2: "f"}

_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype, _capsule_get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype, _capsule_rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


class _DLHold:
    """Owns a consumed DLPack tensor: calls its deleter when the call is done with it."""

    def __init__(self, capsule, obj):
        self.obj = obj  # the producer stays alive too
        ptr = _capsule_get(capsule, b"dltensor")
        self.mt = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor))
        _capsule_rename(capsule, b"used_dltensor")  # ours now: the capsule won't delete it

    def __del__(self):
        mt = getattr(self, "mt", None)
        if mt:
            self.mt = None
            if mt.contents.deleter:
                mt.contents.deleter(mt)


def _stream_handle(stream):
    """A cudaStream_t as an int from an int, a CuPy stream (.ptr), a PyTorch stream
    (.cuda_stream) or None (None stays None)."""
    if stream is None or isinstance(stream, int):
        return stream
    for attr in ("ptr", "cuda_stream"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    _fail("stream", f"cannot use {type(stream).__name__} as a CUDA stream "
                    "(pass an int handle, a CuPy or a PyTorch stream)")


def _cuda_array_interface(obj, func, name):
    """obj.__cuda_array_interface__, or None. Producers may refuse with another exception than
    AttributeError (PyTorch: RuntimeError for a tensor that requires grad), which hasattr()
    would let through: that becomes an EmcError."""
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except Exception as e:  # noqa: BLE001 - any producer error is the caller's to fix
        _fail(func, f"{name}: {type(obj).__name__} refused __cuda_array_interface__ ({e}); "
                    "for a tensor that requires grad pass tensor.detach()")


def _adapt(obj, func, name, stream_for_dlpack):
    """Address, device flag, shape and dtype of an array argument, without copying."""
    cai = _cuda_array_interface(obj, func, name)
    if cai is not None:
        if cai.get("mask") is not None:
            _fail(func, f"{name}: masked CUDA arrays are not supported")
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(n) for n in cai["shape"])
        strides = cai.get("strides")
        if not _c_contiguous(shape, strides, dtype.itemsize):
            _fail(func, f"{name}: CUDA array is not C-contiguous (strides {strides}); "
                        "pass a contiguous copy")
        ptr, readonly = cai["data"]
        return _Buf(ptr or 0, True, shape, dtype, keep=obj), readonly
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        dev_type, _dev_id = obj.__dlpack_device__()
        on_device = dev_type in (_KDL_CUDA, _KDL_CUDA_MANAGED)
        if dev_type not in (_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED):
            _fail(func, f"{name}: DLPack device type {dev_type} is neither CPU nor CUDA")
        try:
            if on_device:
                # DLPack: stream None asks for the legacy default stream; 0 is not allowed
                capsule = obj.__dlpack__(stream=stream_for_dlpack if stream_for_dlpack else 1)
            else:
                capsule = obj.__dlpack__()
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            # (NumPy refuses to export a read-only array through DLPack < 1.0)
            _fail(func, f"{name}: the DLPack producer {type(obj).__name__} refused to export "
                        f"it ({type(e).__name__}: {e}); pass a writable array, or a NumPy one")
        hold = _DLHold(capsule, obj)
        t = hold.mt.contents.dl_tensor
        if t.dtype.lanes != 1 or t.dtype.code not in _DL_CODES:
            _fail(func, f"{name}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                        f"{t.dtype.lanes} lanes) is not a plain integer or float")
        dtype = np.dtype(f"{_DL_CODES[t.dtype.code]}{t.dtype.bits // 8}")
        shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        strides = None if not t.strides else tuple(int(t.strides[i]) * dtype.itemsize
                                                   for i in range(t.ndim))
        if not _c_contiguous(shape, strides, dtype.itemsize):
            _fail(func, f"{name}: DLPack tensor is not C-contiguous; pass a contiguous copy")
        ptr = (t.data or 0) + t.byte_offset
        # DLPack < 1.0 has no read-only flag: producers hand out writable memory
        return _Buf(ptr, on_device, shape, dtype, keep=hold), False
    if not isinstance(obj, np.ndarray):
        if not hasattr(obj, "__array_interface__"):
            _fail(func, f"{name}: expected a NumPy array (or __array_interface__, "
                        f"__cuda_array_interface__, DLPack), got {type(obj).__name__}")
        obj = np.asarray(obj)  # zero-copy through __array_interface__
    if not obj.flags.c_contiguous:
        _fail(func, f"{name}: array is not C-contiguous (strides {obj.strides}); "
                    "pass np.ascontiguousarray(...)")
    return _Buf(obj.ctypes.data, False, obj.shape, obj.dtype, keep=obj), not obj.flags.writeable


class _Mem:
    """A host _Buf's bytes as a NumPy array (np.asarray(_Mem(b))): writable, aliasing the
    memory, keeping its owner (a DLPack capsule's holder) alive as the array's base."""

    def __init__(self, b):
        n = int(np.prod(b.shape, dtype=np.int64)) * b.dtype.itemsize
        self._keep = b.keep
        self.__array_interface__ = {"data": (b.ptr or 0, False), "shape": (n,),
                                    "typestr": "|u1", "version": 3}


# --------------------------------------------------------------------------- handles
_LIVE = {"store": 0, "cache": 0, "group": 0}  # library handles this module holds (tests)
_LIVE_LOCK = threading.Lock()


def _live(what, n):
    with _LIVE_LOCK:
        _LIVE[what] += n


class _Owner:
    """A library handle (self._h) that threads share. ctypes releases the GIL during a call,
    so another thread's close() could free the handle under it: every call that uses the
    handle registers as in flight (_call), close() (_closing) refuses new calls, waits until
    none is in flight and only then destroys. A call on a closed object raises EmcError
    (EMC_EINVAL, "... is closed"). Two closes at once: the second waits for the first and
    finds the object closed. A close() from a thread with a call in flight on the object (a
    signal handler, a buffer protocol hook) raises EmcError instead of waiting for itself. A
    child of fork() starts with no call in flight. A lock round trip on entry and on exit.
    A new method that uses the handle must be an @_in_flight one or use _call."""

    _what = "object"

    def _init_owner(self):
        self._h = ctypes.c_void_p()
        # reentrant: the collector may run a finalizer (a Cache's close() dropping its user
        # count on this store) on a thread that holds the lock
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._closing = None  # the closing thread's id
        self._mine = {}       # thread id -> calls it has in flight here (empty: none at all)
        _OWNERS.add(self)

    def _after_fork(self):
        """In a child of fork(): the parent's other threads and their calls are gone."""
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._closing = None
        self._mine = {}

    def _enter(self, func):
        me, counted = threading.get_ident(), False
        try:
            with self._lock:
                h = None if self._closing is not None else self._h
                if h:
                    self._mine[me] = self._mine.get(me, 0) + 1
                    counted = True
        except BaseException:  # (KeyboardInterrupt on the way out of the lock)
            if counted:
                self._leave()
            raise
        if not h:
            _fail(func, f"the {self._what} is closed")
        return h

    def _leave(self):
        me = threading.get_ident()
        with self._lock:
            n = self._mine.get(me, 0) - 1
            if n > 0:
                self._mine[me] = n
            else:
                self._mine.pop(me, None)
            if self._closing is not None and not self._mine:
                self._idle.notify_all()

    def _call(self, func):
        """`with self._call(func) as h:` the handle, in flight for the block."""
        return _InFlight(self, func)

    def _closing_handle(self):
        """For close(): refuse new calls, wait for those in flight; the handle (None when
        already closed). The caller destroys it, then calls _closed(ok)."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the handle existed
            return None
        me = threading.get_ident()
        with lock:
            while self._closing is not None:
                if self._closing == me:  # a close nested in this thread's own close
                    return None
                self._idle.wait()  # another thread's close(): then closed, or reopened
            if not self._h:
                return None
            if self._mine.get(me):
                _fail("close", f"close() of the {self._what} from inside a call on it in this "
                      "thread (a signal handler or a buffer hook?): it would wait for itself")
            self._closing = me
            while self._mine:
                self._idle.wait()
            return self._h

    def _closed(self, destroyed):
        """After close()'s destroy: forget the handle if it was destroyed, else reopen."""
        with self._lock:
            if destroyed:
                self._h = ctypes.c_void_p()
            self._closing = None
            self._idle.notify_all()


_OWNERS = weakref.WeakSet()  # every _Owner, for fork()'s child


def _after_fork_in_child():
    for o in list(_OWNERS):
        o._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _in_flight(func):
    """Decorator: the method runs as a call in flight on self (an _Owner)."""
    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            self._enter(func)
            try:
                return method(self, *args, **kwargs)
            finally:
                self._leave()
        return call
    return wrap


class _InFlight:
    __slots__ = ("o", "h")

    def __init__(self, o, func):
        self.h = o._enter(func)
        self.o = o

    def __enter__(self):
        return self.h

    def __exit__(self, *exc):
        self.o._leave()


# --------------------------------------------------------------------------- store
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


# --------------------------------------------------------------------------- optimizer
class Optimizer:
    """emc_optimizer: the step Cache.apply_gradients takes.

    kind    "sgd" (w = fma(-lr, g, w) per element) or "rowwise_adagrad" (one accumulator per
            row: every table with ids in the batch needs state="adagrad")
    merge   "sum" or "mean": how the gradients of a batch's duplicate ids combine (summed in
            position order; "mean" then divides by the number of positions)
    lr      learning rate; eps, initial_accumulator: Adagrad's (>= 0). Finite numbers, taken
            as float32 (a value that overflows float32 is refused).
    The fields are checked here (EmcError, EMC_EINVAL), when the Optimizer is made and again
    at every call (they may be reassigned in between); an unknown keyword raises EmcError too.
    The C struct is made by emc_optimizer_init, so its struct_size is the library's."""

    FIELDS = ("kind", "merge", "lr", "eps", "initial_accumulator")

    def __init__(self, kind="sgd", merge="sum", lr=0.01, eps=1e-8, initial_accumulator=0.0,
                 **unknown):
        if unknown:
            _fail("Optimizer", f"unknown field {', '.join(map(repr, unknown))}; the fields are "
                               f"{', '.join(self.FIELDS)}")
        self.kind, self.merge, self.lr = kind, merge, lr
        self.eps, self.initial_accumulator = eps, initial_accumulator
        self._as_c("Optimizer")

    def _as_c(self, func):
        """The emc_optimizer of these fields, checked."""
        o = _Optimizer()
        _fn("emc_optimizer_init")(ctypes.byref(o))
        if o.struct_size != ctypes.sizeof(_Optimizer):
            _fail(func, f"emc_optimizer is {o.struct_size} bytes in the library, "
                        f"{ctypes.sizeof(_Optimizer)} in this module")
        for name, table in (("kind", _OPT_KINDS), ("merge", _MERGES)):
            v = getattr(self, name)
            if not isinstance(v, str) or v not in table:
                _fail(func, f"optimizer {name} {v!r}: use one of {list(table)}")
            setattr(o, name, table[v])
        for name in ("lr", "eps", "initial_accumulator"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                _fail(func, f"optimizer {name} = {v!r}: need a real number")
            try:
                f = ctypes.c_float(float(v)).value  # what the library will see
            except OverflowError:  # an int beyond any float
                f = math.inf
            if not math.isfinite(f):
                _fail(func, f"optimizer {name} = {v}: must be finite as a float32")
            if name != "lr" and f < 0:
                _fail(func, f"optimizer {name} = {v}: must be >= 0")
            setattr(o, name, f)
        return o

    def __repr__(self):
        return "Optimizer(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __eq__(self, other):
        return isinstance(other, Optimizer) and all(
            getattr(self, k) == getattr(other, k) for k in self.FIELDS)


# --------------------------------------------------------------------------- cache
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


def device_count():
    """CUDA devices this build of the library can use; EmcError (EMC_ENODEV with the reason,
    e.g. no NVIDIA driver, or EMC_EUNSUPPORTED without CUDA) when none."""
    lib = library()
    if not hasattr(lib, "emc_device_count"):
        _fail("emc_device_count", "this library has no emc_device_count")
    n = ctypes.c_int()
    _check(lib.emc_device_count(ctypes.byref(n)), "emc_device_count")
    return n.value


if __name__ == "__main__":
    lib = load(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"embcache {version()} from {lib._name}\nhost allocator: {host_allocator()}")
