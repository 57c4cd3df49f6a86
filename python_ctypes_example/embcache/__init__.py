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

Layout: _capi.py (the C API's mirrors, loading, EmcError, argument checks), _arrays.py
(array arguments), _handles.py (handles shared by threads), store.py, optimizer.py, cache.py,
group.py; this file re-exports the public names.

Adding a call: add its prototype to _SIGNATURES in _capi.py (missing symbols are skipped, so
the package still loads against an older library), then write a Cache method (cache.py) from
the helpers every method there uses: self._ids(), self._offsets(), self._rows(),
self._where(), self._stream() and _check(). See Cache.insert for a ten-line example.
"""

from ._capi import (  # noqa: F401
    EMC_OK, EMC_EINVAL, EMC_ERANGE, EMC_EIO, EMC_EUNSUPPORTED, EMC_ECAPACITY, EMC_ETIMEDOUT,
    WHERE_CACHE, WHERE_STORE, WHERE_ABSENT, load, library, version, host_allocator,
    EmcError, EmcCapacityError, _Optimizer)
from .store import Table, Store  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .cache import Cache, device_count  # noqa: F401
from .group import Group  # noqa: F401

__all__ = ["EmcError", "EmcCapacityError", "Table", "Store", "Cache", "Optimizer", "Group", "load",
           "library", "version", "host_allocator", "device_count", "WHERE_CACHE",
           "WHERE_STORE", "WHERE_ABSENT"]
