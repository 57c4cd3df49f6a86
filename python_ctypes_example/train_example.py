#!/usr/bin/env python3
"""Training embeddings inside embcache from NumPy (the embcache binding, host backend).

A toy click model: p(click | user, item) = sigmoid(w . (e_user + e_item) + b), the two
embedding tables kept by embcache (row-wise Adagrad, its accumulator stored beside each row),
w and b by NumPy. The data come from hidden per-user and per-item affinities, ids drawn from
Zipf distributions. Each step is the pipeline of embcache.h's "training" section:

    cache.prefetch(batch i+1)         make the next batch's rows resident, and pin them
    cache.lookup(batch i)             all hits: batch i was prefetched one step earlier
    forward / backward in NumPy
    cache.apply_gradients(batch i)    the optimizer step on the rows, inside the cache

and every --report steps it prints the mean loss and the hit ratio of the lookups. Exits 1
unless the loss went down.

    python3 python_ctypes_example/train_example.py [--steps N] [--batch N] [--report N]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embcache as emc  # noqa: E402

USERS, ITEMS, DIM = 50_000, 10_000, 16


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=512, help="samples per step")
    ap.add_argument("--report", type=int, default=50, help="print every N steps")
    args = ap.parse_args()
    args.report = max(1, min(args.report, args.steps // 2))  # at least two reports to compare
    rng = np.random.default_rng(0)
    user_pop = 1.0 / np.arange(1, USERS + 1) ** 1.1   # Zipf popularity
    item_pop = 1.0 / np.arange(1, ITEMS + 1) ** 1.1
    user_pop, item_pop = user_pop / user_pop.sum(), item_pop / item_pop.sum()
    true_user, true_item = rng.normal(0, 1.5, USERS), rng.normal(0, 1.5, ITEMS)

    def make_batch():
        u = rng.choice(USERS, args.batch, p=user_pop)
        i = rng.choice(ITEMS, args.batch, p=item_pop)
        y = (rng.random(args.batch) < sigmoid(true_user[u] + true_item[i])).astype(np.float32)
        ids = np.concatenate([u, i]).astype(np.uint64)  # table 0's ids, then table 1's
        return ids, np.array([0, args.batch, 2 * args.batch], np.uint64), y

    store = emc.Store([emc.Table("users", USERS, DIM, state="adagrad"),
                       emc.Table("items", ITEMS, DIM, state="adagrad")])
    store.fill_uniform(0, -0.05, 0.05, seed=1)
    store.fill_uniform(1, -0.05, 0.05, seed=2)
    opt = emc.Optimizer("rowwise_adagrad", merge="sum", lr=0.05)
    w, b = rng.normal(0, 0.1, DIM).astype(np.float32), np.float32(0)
    losses, hits, looked_up, first = [], 0, 0, None
    # 512 KiB: ~14% of the store's 3.8 MiB of rows
    with emc.Cache(store, backend="host", capacity_bytes=512 << 10, prefetch_depth=1) as cache:
        nxt = make_batch()
        cache.prefetch(nxt[0], nxt[1])
        for step in range(1, args.steps + 1):
            (ids, offsets, y), nxt = nxt, make_batch()
            try:
                cache.prefetch(nxt[0], nxt[1])  # on a GPU: a side stream, beside this step
            except emc.EmcCapacityError as e:  # a partial success: lookups stay correct
                print(f"train_example: step {step}: {e.detail}")
            rows, where = cache.lookup(ids, offsets, where=True)  # (2 * batch, DIM) float32
            hits += int((where == emc.WHERE_CACHE).sum())
            looked_up += where.size
            e_sum = rows[:args.batch] + rows[args.batch:]           # e_user + e_item
            p = sigmoid(e_sum @ w + b)
            losses.append(float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))))
            d_logit = (p - y) / args.batch                          # dLoss / dlogit
            g_row = np.outer(d_logit, w).astype(np.float32)         # dLoss / de, both tables
            w -= np.float32(0.5) * (d_logit @ e_sum)
            b -= np.float32(0.5) * d_logit.sum()
            cache.apply_gradients(ids, offsets, np.concatenate([g_row, g_row]), opt)
            if step % args.report == 0:
                loss = float(np.mean(losses[-args.report:]))
                first = loss if first is None else first
                print(f"train_example: step {step:4d}  loss {loss:.4f}  hit ratio of lookups "
                      f"after prefetch {hits / looked_up:.3f}")
                hits = looked_up = 0
        st = cache.stats()
        print(f"train_example: cache: {st['prefetched']} rows prefetched, {st['pin_shortfall']} "
              f"not pinned, {st['gradient_rows']} row updates, {st['evictions']} evictions")
    # closing the cache wrote every updated row and accumulator back to the store
    acc = store.read_state(0, np.arange(100, dtype=np.uint64))
    print(f"train_example: Adagrad accumulators of the 100 most popular users: mean "
          f"{acc.mean():.3g}")
    store.close()
    if not loss < 0.95 * first:
        print(f"train_example: FAIL: the loss went from {first:.4f} to {loss:.4f}")
        return 1
    print(f"train_example: loss {first:.4f} -> {loss:.4f}\ntrain_example: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
