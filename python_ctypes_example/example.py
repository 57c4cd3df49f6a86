#!/usr/bin/env python3
"""embcache from Python with ctypes + NumPy, no bindings to build.

Builds a store of four dense f32 tables (10k..200k rows, dim 16/32) plus one hashed table,
fills it with emc_store_fill_uniform, puts a host-backend cache of 10% of the store's bytes
over it, looks up Zipf-distributed batches (TorchRec-style: ids grouped by table, uint64
offsets) into a preallocated float32 NumPy array with emc_lookup, checks every row against
emc_store_read of the same ids, and prints the hit ratio (emc_get_stats) and lookups/s.
Exits non-zero, with emc_status_name + emc_last_error_detail, on any error.

Library search order: $EMC_LIB (only that, if set), ../build/libembcache.so relative to this
script, build/libembcache.so relative to the current directory.

    python3 python_ctypes_example/example.py [--batches N] [--batch-size N] [--seed S]
"""

import argparse
import ctypes
import ctypes.util
import os
import re
import subprocess
import sys
import time

# --------------------------------------------------------------------------- loading
# Debian's libjemalloc.so.2 is linked with initial-exec TLS (DT_FLAGS STATIC_TLS, ~2.6 KiB
# of TLS). A library that needs it and is dlopen()ed after the interpreter started, as
# ctypes does, must fit that TLS into glibc's small static-TLS surplus (512 bytes by
# default), so the load fails with "cannot allocate memory in static TLS block".
# Choices (each tried on Debian 12, glibc 2.36):
#   * ctypes.CDLL("libjemalloc.so.2", RTLD_GLOBAL) first: useless, that is a dlopen too and
#     fails the same way.
#   * GLIBC_TUNABLES=glibc.rtld.optional_static_tls=<bytes>: works, but only on glibc >=
#     2.32 and only while jemalloc's TLS fits the number we pick.
#   * LD_PRELOAD=<libjemalloc.so.2>: works on every glibc: preloaded objects are part of
#     the initial TLS block. Side effect: this Python process allocates with jemalloc,
#     which is harmless.
# So: try a plain load; if (and only if) it fails with the static-TLS error, re-exec this
# interpreter once with the jemalloc that the library links (found with ldd, else
# ctypes.util.find_library) prepended to LD_PRELOAD. _EMC_EXAMPLE_REEXEC stops a loop.
# (Linking libjemalloc_pic.a into libembcache.so does not help: that archive is also
# compiled with initial-exec TLS, so the .so inherits STATIC_TLS.)
_REEXEC_MARK = "_EMC_EXAMPLE_REEXEC"


def _candidate_paths():
    env = os.environ.get("EMC_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.normpath(os.path.join(here, "..", "build", "libembcache.so")),
            os.path.abspath(os.path.join("build", "libembcache.so"))]


def _jemalloc_path(lib_path):
    try:
        out = subprocess.run(["ldd", lib_path], capture_output=True, text=True,
                             check=False).stdout
        m = re.search(r"^\s*(libjemalloc\S*)\s+=>\s+(\S+)", out, re.M)
        if m and os.path.exists(m.group(2)):
            return m.group(2)
    except OSError:
        pass
    return ctypes.util.find_library("jemalloc")  # a soname; LD_PRELOAD searches for it


def load_library():
    paths = _candidate_paths()
    path = next((p for p in paths if os.path.exists(p)), None)
    if path is None:
        sys.exit("example: libembcache.so not found; looked at: " + ", ".join(paths)
                 + " (build it with `make build`, or set EMC_LIB)")
    try:
        return ctypes.CDLL(path), path
    except OSError as e:
        if "static TLS" not in str(e) or os.environ.get(_REEXEC_MARK):
            sys.exit(f"example: cannot load {path}: {e}")
        jem = _jemalloc_path(path)
        if not jem:
            sys.exit(f"example: cannot load {path}: {e} (and no libjemalloc to preload)")
        env = dict(os.environ)
        env["LD_PRELOAD"] = jem + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env[_REEXEC_MARK] = "1"
        argv = list(getattr(sys, "orig_argv", [])) or [sys.executable] + sys.argv
        argv[0] = sys.executable
        print(f"example: {os.path.basename(path)} needs static TLS for jemalloc; "
              f"re-running with LD_PRELOAD={jem}", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os.execve(sys.executable, argv, env)


# --------------------------------------------------------------------------- the C API
# Mirrors of include/embcache.h (C enums are int-sized here).
EMC_OK = 0
EMC_DTYPE_F32, EMC_DTYPE_F16 = 0, 1
EMC_TABLE_DENSE, EMC_TABLE_HASHED = 0, 1
EMC_BACKEND_AUTO, EMC_BACKEND_HOST, EMC_BACKEND_CUDA = 0, 1, 2

c_u64p = ctypes.POINTER(ctypes.c_uint64)


class emc_table_desc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("kind", ctypes.c_int),       # emc_table_kind
                ("rows", ctypes.c_uint64),
                ("dim", ctypes.c_uint32),
                ("dtype", ctypes.c_int)]      # emc_dtype


class emc_cache_config(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("backend", ctypes.c_int),    # emc_backend
                ("device", ctypes.c_int),
                ("capacity_bytes", ctypes.c_size_t),
                ("evict_high", ctypes.c_float),
                ("evict_low", ctypes.c_float),
                ("key_bits", ctypes.c_uint32),
                ("unified_index_rows", ctypes.c_uint64),
                ("hash_seed", ctypes.c_uint64)]


class emc_stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "lookups", "hits", "misses", "absent", "admissions", "admit_skipped", "inserts",
        "evictions", "writebacks", "evict_passes", "retries", "unified_hits", "rows_cached",
        "bytes_in_use", "bytes_reserved", "capacity_bytes", "index_bytes", "dirty_rows")]


# Sizes on x86-64 / aarch64 Linux (LP64), checked against the header with offsetof.
assert ctypes.sizeof(emc_table_desc) == 32
assert ctypes.sizeof(emc_cache_config) == 56
assert ctypes.sizeof(emc_stats) == 144


def declare(lib):
    S, P, U32, U64, SZ = ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
    sigs = {
        "emc_version_string": (ctypes.c_char_p, []),
        "emc_status_name": (ctypes.c_char_p, [S]),
        "emc_last_error_detail": (ctypes.c_char_p, []),
        "emc_store_create": (S, [ctypes.POINTER(emc_table_desc), U32, ctypes.POINTER(P)]),
        "emc_store_destroy": (None, [P]),
        "emc_store_fill_uniform": (S, [P, U32, ctypes.c_float, ctypes.c_float, U64]),
        "emc_store_write": (S, [P, U32, c_u64p, SZ, P]),
        "emc_store_read": (S, [P, U32, c_u64p, SZ, P]),
        "emc_cache_config_init": (None, [ctypes.POINTER(emc_cache_config)]),
        "emc_cache_create": (S, [P, ctypes.POINTER(emc_cache_config), ctypes.POINTER(P)]),
        "emc_cache_destroy": (S, [P]),
        "emc_cache_backend": (S, [P]),
        "emc_batch_bytes": (S, [P, c_u64p, ctypes.POINTER(SZ)]),
        "emc_lookup": (S, [P, c_u64p, c_u64p, P, P]),
        "emc_get_stats": (S, [P, ctypes.POINTER(emc_stats)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


class EmcError(RuntimeError):
    pass


def check(lib, status, what):
    if status != EMC_OK:
        name = lib.emc_status_name(status).decode()
        detail = lib.emc_last_error_detail().decode(errors="replace")
        raise EmcError(f"{what} failed: {name} ({status}): {detail}")


# --------------------------------------------------------------------------- workload
TABLES = [  # (name, kind, rows, dim); all f32
    ("users", EMC_TABLE_DENSE, 10_000, 16),
    ("items", EMC_TABLE_DENSE, 50_000, 32),
    ("categories", EMC_TABLE_DENSE, 100_000, 16),
    ("queries", EMC_TABLE_DENSE, 200_000, 32),
    ("hashed_tags", EMC_TABLE_HASHED, 20_000, 16),
]
HASHED_PRESENT = 15_000  # distinct ids written into the hashed table


def zipf_sampler(np, rng, n, s):
    """Bounded Zipf(s) over ranks 0..n-1, ranks scattered over ids by a permutation."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    perm = rng.permutation(n).astype(np.uint64)

    def draw(k):
        return perm[np.minimum(np.searchsorted(cdf, rng.random(k)), n - 1)]
    return draw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=2048, help="ids per table per batch")
    ap.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--capacity", type=float, default=0.10, help="cache bytes / store bytes")
    args = ap.parse_args()

    lib, path = load_library()  # before anything heavy: it may re-exec the interpreter
    declare(lib)
    import numpy as np

    print(f"example: {path} (embcache {lib.emc_version_string().decode()}, numpy {np.__version__})")
    rng = np.random.default_rng(args.seed)
    n_tables = len(TABLES)

    descs = (emc_table_desc * n_tables)()
    names = [t[0].encode() for t in TABLES]  # keep the bytes alive during the call
    for i, (name, kind, rows, dim) in enumerate(TABLES):
        descs[i] = emc_table_desc(names[i], kind, rows, dim, EMC_DTYPE_F32)
    store_bytes = sum(rows * dim * 4 for _, _, rows, dim in TABLES)

    store, cache = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        check(lib, lib.emc_store_create(descs, n_tables, ctypes.byref(store)), "emc_store_create")

        # The hashed table: HASHED_PRESENT random 64-bit ids get a row (zeros), then
        # fill_uniform gives every present id its value.
        hashed_t = next(i for i, t in enumerate(TABLES) if t[1] == EMC_TABLE_HASHED)
        hdim = TABLES[hashed_t][3]
        hashed_ids = np.unique(rng.integers(0, 2**64 - 1, size=HASHED_PRESENT, dtype=np.uint64,
                                            endpoint=True))
        zeros = np.zeros((hashed_ids.size, hdim), dtype=np.float32)
        check(lib, lib.emc_store_write(store, hashed_t, hashed_ids.ctypes.data_as(c_u64p),
                                       hashed_ids.size, zeros.ctypes.data_as(ctypes.c_void_p)),
              "emc_store_write")
        for t in range(n_tables):
            check(lib, lib.emc_store_fill_uniform(store, t, -1.0, 1.0, 1234 + t),
                  f"emc_store_fill_uniform(table {t})")

        cfg = emc_cache_config()
        lib.emc_cache_config_init(ctypes.byref(cfg))
        if cfg.struct_size != ctypes.sizeof(emc_cache_config):
            raise EmcError(f"emc_cache_config: library says {cfg.struct_size} bytes, "
                           f"this mirror has {ctypes.sizeof(emc_cache_config)}")
        cfg.backend = EMC_BACKEND_HOST
        cfg.capacity_bytes = int(store_bytes * args.capacity)
        check(lib, lib.emc_cache_create(store, ctypes.byref(cfg), ctypes.byref(cache)),
              "emc_cache_create")
        backend = lib.emc_cache_backend(cache)
        print(f"example: store {store_bytes / 2**20:.1f} MiB in {n_tables} tables, cache "
              f"{cfg.capacity_bytes / 2**20:.1f} MiB, backend "
              f"{ {1: 'host', 2: 'cuda'}.get(backend, backend) }")

        # Samplers: dense tables draw ids directly; the hashed table draws present ids,
        # plus ~2% random ids that are absent (zero rows).
        samplers = []
        for t, (_, kind, rows, _) in enumerate(TABLES):
            if kind == EMC_TABLE_DENSE:
                samplers.append(zipf_sampler(np, rng, rows, args.zipf))
            else:
                pick = zipf_sampler(np, rng, hashed_ids.size, args.zipf)

                def hashed_draw(k, pick=pick):
                    ids = hashed_ids[pick(k)]
                    absent = rng.random(k) < 0.02
                    ids[absent] = rng.integers(0, 2**64 - 1, size=int(absent.sum()),
                                               dtype=np.uint64, endpoint=True)
                    return ids
                samplers.append(hashed_draw)

        bs = args.batch_size
        offsets = np.arange(n_tables + 1, dtype=np.uint64) * np.uint64(bs)
        dims = np.array([t[3] for t in TABLES], dtype=np.int64)
        elem_off = np.concatenate([[0], np.cumsum(dims * bs)])  # float32 offsets per table
        out = np.empty(int(elem_off[-1]), dtype=np.float32)     # preallocated, reused
        ref = np.empty_like(out)

        nbytes = ctypes.c_size_t()
        check(lib, lib.emc_batch_bytes(store, offsets.ctypes.data_as(c_u64p), ctypes.byref(nbytes)),
              "emc_batch_bytes")
        if nbytes.value != out.nbytes:
            raise EmcError(f"emc_batch_bytes = {nbytes.value}, expected {out.nbytes}")

        lookup_s = 0.0
        n_ids = 0
        for b in range(args.batches):
            ids = np.ascontiguousarray(np.concatenate([samplers[t](bs) for t in range(n_tables)]),
                                       dtype=np.uint64)
            t0 = time.perf_counter()
            st = lib.emc_lookup(cache, ids.ctypes.data_as(c_u64p), offsets.ctypes.data_as(c_u64p),
                                out.ctypes.data_as(ctypes.c_void_p), None)
            lookup_s += time.perf_counter() - t0
            check(lib, st, f"emc_lookup(batch {b})")
            n_ids += ids.size

            # Every row must equal the store's row for the same id.
            for t in range(n_tables):
                seg = ids[int(offsets[t]):int(offsets[t + 1])]
                dst = ref[int(elem_off[t]):int(elem_off[t + 1])]
                check(lib, lib.emc_store_read(store, t, seg.ctypes.data_as(c_u64p), seg.size,
                                              dst.ctypes.data_as(ctypes.c_void_p)),
                      f"emc_store_read(table {t})")
                got = out[int(elem_off[t]):int(elem_off[t + 1])]
                if not np.array_equal(got, dst):
                    rows_got = got.reshape(-1, dims[t])
                    rows_ref = dst.reshape(-1, dims[t])
                    bad = np.nonzero(~np.all(rows_got == rows_ref, axis=1))[0]
                    raise EmcError(f"batch {b} table {t} ({TABLES[t][0]}): {bad.size} rows differ "
                                   f"from emc_store_read, first id {int(seg[bad[0]])}")

        stats = emc_stats()
        check(lib, lib.emc_get_stats(cache, ctypes.byref(stats)), "emc_get_stats")
        if stats.lookups != n_ids:
            raise EmcError(f"stats.lookups = {stats.lookups}, expected {n_ids}")
        served = stats.hits + stats.misses + stats.absent
        if served != stats.lookups:
            raise EmcError(f"hits + misses + absent = {served} != lookups = {stats.lookups}")
        hit_ratio = stats.hits / stats.lookups if stats.lookups else 0.0
        print(f"example: {args.batches} batches x {n_tables} tables x {bs} ids: all "
              f"{n_ids} rows match emc_store_read")
        print(f"example: hit ratio {hit_ratio:.3f} (hits {stats.hits}, misses {stats.misses}, "
              f"absent {stats.absent}, evictions {stats.evictions}, rows cached "
              f"{stats.rows_cached})")
        print(f"example: {n_ids / lookup_s:,.0f} lookups/s "
              f"({lookup_s * 1e3:.1f} ms in emc_lookup)")

        st = lib.emc_cache_destroy(cache)
        cache = ctypes.c_void_p()
        check(lib, st, "emc_cache_destroy")
    except EmcError as e:
        print(f"example: ERROR: {e}", file=sys.stderr)
        return 1
    finally:
        if cache:
            lib.emc_cache_destroy(cache)
        if store:
            lib.emc_store_destroy(store)
    print("example: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
