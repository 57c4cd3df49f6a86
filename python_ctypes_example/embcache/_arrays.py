"""Array arguments: NumPy, __array_interface__, __cuda_array_interface__ and DLPack producers
checked (dtype, shape, contiguity, writability) and turned into addresses, without copying."""

import ctypes

import numpy as np

from ._capi import _fail


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
