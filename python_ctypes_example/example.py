#!/usr/bin/env python3
"""embcache from Python through the embcache binding (ctypes + NumPy, nothing to build).

Builds a store of four dense f32 tables (10k..200k rows, dim 16/32) plus one hashed table,
fills it with emc_store_fill_uniform, puts a host-backend cache of 10% of the store's bytes
over it, looks up Zipf-distributed batches (TorchRec-style: ids grouped by table, uint64
offsets) into one preallocated NumPy buffer, checks every row against emc_store_read of the
same ids, and prints the hit ratio, lookups/s and which allocator holds the rows.
Exits 1 with the library's status name and detail on any error.

Library: $EMC_LIB if set, else ../build/libembcache.so relative to this script, else
build/libembcache.so under the current directory, else an installed libembcache.so.

    python3 python_ctypes_example/example.py [--batches N] [--batch-size N] [--zipf S]
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embcache as emc  # noqa: E402

TABLES = [  # (name, kind, rows, dim); all f32
    ("users", "dense", 10_000, 16),
    ("items", "dense", 50_000, 32),
    ("categories", "dense", 100_000, 16),
    ("queries", "dense", 200_000, 32),
    ("hashed_tags", "hashed", 20_000, 16),
]
HASHED_PRESENT = 15_000  # distinct ids written into the hashed table


def zipf_sampler(rng, n, s):
    """Bounded Zipf(s) over ranks 0..n-1, ranks scattered over ids by a permutation."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    perm = rng.permutation(n).astype(np.uint64)

    def draw(k):
        return perm[np.minimum(np.searchsorted(cdf, rng.random(k)), n - 1)]
    return draw


def run(args):
    lib = emc.load()
    print(f"example: {lib._name} (embcache {emc.version()}, numpy {np.__version__})")
    print(f"example: host allocator: {emc.host_allocator()}")
    rng = np.random.default_rng(args.seed)
    n_tables = len(TABLES)
    store = emc.Store([emc.Table(name, rows, dim, "f32", kind) for name, kind, rows, dim in TABLES])
    try:
        # The hashed table: HASHED_PRESENT random 64-bit ids get a row, then fill_uniform
        # gives every present id its value.
        hashed_t = next(i for i, t in enumerate(TABLES) if t[1] == "hashed")
        hashed_ids = np.unique(rng.integers(0, 2**64 - 1, size=HASHED_PRESENT, dtype=np.uint64,
                                            endpoint=True))
        store.write(hashed_t, hashed_ids,
                    np.zeros((hashed_ids.size, TABLES[hashed_t][3]), dtype=np.float32))
        for t in range(n_tables):
            store.fill_uniform(t, -1.0, 1.0, 1234 + t)
        store_bytes = sum(rows * dim * 4 for _, _, rows, dim in TABLES)

        with emc.Cache(store, backend="host",
                       capacity_bytes=int(store_bytes * args.capacity)) as cache:
            print(f"example: store {store_bytes / 2**20:.1f} MiB in {n_tables} tables, cache "
                  f"{cache.config['capacity_bytes'] / 2**20:.1f} MiB, backend {cache.backend}")
            samplers = []
            for t, (_, kind, rows, _) in enumerate(TABLES):
                if kind == "dense":
                    samplers.append(zipf_sampler(rng, rows, args.zipf))
                    continue
                pick = zipf_sampler(rng, hashed_ids.size, args.zipf)

                def hashed_draw(k, pick=pick):  # present ids plus ~2% absent (zero rows)
                    ids = hashed_ids[pick(k)]
                    absent = rng.random(k) < 0.02
                    ids[absent] = rng.integers(0, 2**64 - 1, size=int(absent.sum()),
                                               dtype=np.uint64, endpoint=True)
                    return ids
                samplers.append(hashed_draw)

            bs = args.batch_size
            offsets = np.arange(n_tables + 1, dtype=np.uint64) * np.uint64(bs)
            # every table is f32: a 1-D float32 buffer of sum(n_t * dim_t) elements, reused
            out = np.empty(cache.batch_bytes(offsets) // 4, dtype=np.float32)
            lookup_s, n_ids = 0.0, 0
            for b in range(args.batches):
                ids = np.concatenate([samplers[t](bs) for t in range(n_tables)])
                t0 = time.perf_counter()
                cache.lookup(ids, offsets, out=out)
                lookup_s += time.perf_counter() - t0
                n_ids += ids.size
                # every row must equal the store's row for the same id
                for t, got in enumerate(cache.split(out, offsets)):
                    seg = ids[int(offsets[t]):int(offsets[t + 1])]
                    want = store.read(t, seg)
                    if not np.array_equal(got, want):
                        bad = np.nonzero(~np.all(got == want, axis=1))[0]
                        raise emc.EmcError(1, "example", f"batch {b} table {t} ({TABLES[t][0]}): "
                                           f"{bad.size} rows differ from emc_store_read, first "
                                           f"id {int(seg[bad[0]])}")
            st = cache.stats()
            if st["lookups"] != n_ids or st["hits"] + st["misses"] + st["absent"] != n_ids:
                raise emc.EmcError(1, "example", f"stats disagree: {st}")
            print(f"example: {args.batches} batches x {n_tables} tables x {bs} ids: all "
                  f"{n_ids} rows match emc_store_read")
            print(f"example: hit ratio {st['hits'] / n_ids:.3f} (hits {st['hits']}, misses "
                  f"{st['misses']}, absent {st['absent']}, evictions {st['evictions']}, rows "
                  f"cached {st['rows_cached']})")
            print(f"example: {n_ids / lookup_s:,.0f} lookups/s ({lookup_s * 1e3:.1f} ms in "
                  f"emc_lookup)")
    finally:
        store.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=2048, help="ids per table per batch")
    ap.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--capacity", type=float, default=0.10, help="cache bytes / store bytes")
    args = ap.parse_args()
    try:
        run(args)
    except emc.EmcError as e:
        print(f"example: ERROR: {e}", file=sys.stderr)
        return 1
    print("example: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
