"""What the binding's test modules share: the library and package paths the runner
(tests/test_python.py) sets, and the stores, caches and batches most tests start from."""

import numpy as np

import embcache as emc  # the runner put the package's folder on sys.path

LIB = None    # libembcache.so (the runner sets it)
PYDIR = None  # the folder holding the embcache package (the runner sets it)


def inline_cache(store, **config):
    """A host cache as the suite's expectations assume it: a lookup's misses cached when it
    returns and stats exact without a flush (admission "inline"; the default, "auto", may admit
    on the cache's thread: T03bBackgroundAdmission covers it)."""
    config.setdefault("admission", "inline")
    return emc.Cache(store, **config)

def make_store():
    store = emc.Store([emc.Table("users", rows=5000, dim=16),
                       emc.Table("items", rows=3000, dim=8, dtype="f16"),
                       emc.Table("tags", rows=2000, dim=16, kind="hashed")])
    rng = np.random.default_rng(5)
    present = np.unique(rng.integers(0, 2**64 - 1, size=1500, dtype=np.uint64, endpoint=True))
    store.write(2, present, np.zeros((present.size, 16), dtype=np.float32))
    for t in range(3):
        store.fill_uniform(t, -1.0, 1.0, seed=100 + t)
    return store, present


def make_batch(rng, present, n=(300, 200, 250)):
    ids = [rng.integers(0, 5000, n[0]), rng.integers(0, 3000, n[1])]
    tags = present[rng.integers(0, present.size, n[2])]
    absent = rng.random(n[2]) < 0.1
    tags[absent] = rng.integers(0, 2**64 - 1, int(absent.sum()), dtype=np.uint64, endpoint=True)
    ids = np.concatenate([a.astype(np.uint64) for a in ids] + [tags])
    offsets = np.array([0, n[0], n[0] + n[1], sum(n)], dtype=np.uint64)
    return ids, offsets
