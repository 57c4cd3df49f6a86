#!/usr/bin/env python3
"""Plot emc-bench's JSON lines (emc-bench --plot DIR runs this; it also runs on its own).

    python3 bench/plot_bench.py --out DIR LINES.jsonl [MORE.jsonl ...]

Writes into DIR:
  hit_ratio_vs_cache_<trace>.png   one per trace (preset, scale, dist, alpha, batch, seed):
      hit ratio per distinct key per batch against the cache size as a fraction of all rows
      (log axis): exact LRU over every size (the "record":"mrc" lines), Belady's OPT where
      computed, embcache's measured hit_ratio_distinct at its budget (capacity_bytes; the
      horizontal bar spans t2..t1 of it, where its occupancy moves), exact LRU at t2 and t1
      (lru_hit_ratio_t2 / _t1), and a per-table cache baseline when the lines carry one
      (per_table_hit_ratio_distinct, else per_table_hit_ratio).
  lookups_per_s_vs_batch.png       lookups/s against samples per batch, one series per
      (backend, cache_frac, alpha): embcache (lookups_per_s) and the per-table baseline
      (per_table_lookups_per_s) when present; the plain gather from the store
      (gather_lookups_per_s, the median over cache sizes: it does not use the cache), dotted.
Exit status: 0 ok; 1 no usable lines; 2 matplotlib missing (pip install matplotlib).
"""
import argparse
import json
import os
import sys


def load(paths):
    mrc, cfg = [], []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    o = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot_bench: {p}:{n}: not JSON ({e})")
                if o.get("bench") != "emc-bench":
                    continue  # emc-bench-gpu lines and others: not plotted here
                (mrc if o.get("record") == "mrc" else cfg).append(o)
    return mrc, cfg


TRACE_KEYS = ("preset", "scale", "dist", "alpha", "batch", "batches", "warmup", "seed", "dim")


def trace_key(o):
    return tuple(o.get(k) for k in TRACE_KEYS)


def trace_name(key):
    d = dict(zip(TRACE_KEYS, key))
    parts = [str(d["preset"])]
    if d["scale"] is not None:
        parts.append(f"scale{d['scale']:g}")
    parts.append(d["dist"] if d["alpha"] is None else f"alpha{d['alpha']:g}")
    parts.append(f"batch{d['batch']}")
    return "_".join(parts)


def trace_title(key):
    d = dict(zip(TRACE_KEYS, key))
    s = f"{d['preset']}"
    if d["scale"] is not None:
        s += f" x{d['scale']:g}"
    s += f", {d['dist']}" + ("" if d["alpha"] is None else f" {d['alpha']:g}")
    return s + f", {d['batch']} samples/batch, {d['batches']} batches (+{d['warmup']} warm-up)"


def per_table_field(o):
    for k in ("per_table_hit_ratio_distinct", "per_table_hit_ratio"):
        if o.get(k) is not None:
            return k
    return None


def plot_hit_ratio(plt, out_dir, key, mrc, cfg):
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    grid = sorted((o for o in mrc if o["at"] == "grid"), key=lambda o: o["cache_rows"])
    if grid:
        ax.plot([o["cache_frac"] for o in grid], [o["lru_hit_ratio"] for o in grid],
                color="tab:blue", lw=1.8, label="exact LRU (every size)")
    opt = sorted((o for o in mrc if o.get("opt_hit_ratio") is not None),
                 key=lambda o: o["cache_rows"])
    if opt:
        ax.plot([o["cache_frac"] for o in opt], [o["opt_hit_ratio"] for o in opt],
                color="tab:green", ls="--", marker="^", ms=5, label="Belady OPT")
    labelled = set()
    for o in sorted(cfg, key=lambda o: o["cache_frac"]):
        x, y = o["cache_frac"], o.get("hit_ratio_distinct")
        if y is None:
            continue
        lbl = None if "emc" in labelled else \
            f"embcache ({o['backend']}) at its budget; bar: rows in use, t2..t1"
        labelled.add("emc")
        ax.plot([x], [y], "o", color="tab:red", ms=7, label=lbl)
        ax.hlines(y, x * o["t2"], x * o["t1"], color="tab:red", lw=2)
        for k, mk in (("lru_hit_ratio_t2", "<"), ("lru_hit_ratio_t1", ">")):
            if o.get(k) is not None:
                xx = x * (o["t2"] if k.endswith("t2") else o["t1"])
                ax.plot([xx], [o[k]], mk, color="tab:blue", ms=6, mfc="none",
                        label=None if "lru" in labelled else "exact LRU at t2, t1 (check)")
                labelled.add("lru")
        pt = per_table_field(o)
        if pt:
            ax.plot([x], [o[pt]], "s", color="tab:purple", ms=7,
                    label=None if "pt" in labelled else f"per-table caches ({pt})")
            labelled.add("pt")
    ax.set_xscale("log")
    ax.set_xlabel("cache size / all rows (cache rows = bytes / slot stride)")
    ax.set_ylabel("hit ratio per distinct key per batch")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(trace_title(key), fontsize=10)
    if grid:
        sat = grid[-1]
        ax.text(0.98, 0.03, f"LRU saturates at {sat['cache_frac']:.3g} of the rows: beyond it "
                f"only first accesses miss (hit ratio {sat['lru_hit_ratio']:.3f})",
                transform=ax.transAxes, ha="right", fontsize=8, color="tab:blue")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, f"hit_ratio_vs_cache_{trace_name(key)}.png")
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_lookups(plt, out_dir, cfg):
    series, gather = {}, {}
    for o in cfg:
        if o.get("lookups_per_s") is None:
            continue
        k = (o.get("backend"), round(o.get("cache_frac", 0), 6), o.get("alpha"), o.get("preset"))
        series.setdefault(k, []).append(o)
        if o.get("gather_lookups_per_s"):  # independent of the cache: one line per trace kind
            gather.setdefault((o.get("alpha"), o.get("preset")), {}).setdefault(
                o["batch"], []).append(o["gather_lookups_per_s"])
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    batches = set()
    for i, (k, pts) in enumerate(sorted(series.items(), key=lambda kv: str(kv[0]))):
        pts.sort(key=lambda o: o["batch"])
        c = colors[i % len(colors)]
        backend, frac, alpha, preset = k
        name = f"{backend}, cache {frac:g}" + ("" if alpha is None else f", alpha {alpha:g}")
        xs = [o["batch"] for o in pts]
        batches.update(xs)
        ax.plot(xs, [o["lookups_per_s"] for o in pts], "-o", color=c, label=f"embcache {name}")
        if all(o.get("per_table_lookups_per_s") for o in pts):
            ax.plot(xs, [o["per_table_lookups_per_s"] for o in pts], "--s", color=c,
                    label=f"per-table caches {name}")
    for (alpha, preset), by_batch in sorted(gather.items(), key=str):
        xs = sorted(by_batch)
        med = [sorted(by_batch[x])[len(by_batch[x]) // 2] for x in xs]
        ax.plot(xs, med, ":", color="black",
                label="plain gather from the store" + ("" if alpha is None else f", alpha {alpha:g}"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sorted(batches))
    ax.set_xticklabels([str(b) for b in sorted(batches)])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("samples per batch (one id per table per sample)")
    ax.set_ylabel("lookups/s (ids looked up per second)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("emc-bench: lookups/s against batch size", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, "lookups_per_s_vs_batch.png")
    fig.savefig(path)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the PNGs")
    ap.add_argument("lines", nargs="+", help="files of emc-bench JSON lines")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot_bench: matplotlib is missing ({e}); install it: "
              f"{sys.executable} -m pip install matplotlib (or: make deps)", file=sys.stderr)
        return 2
    mrc, cfg = load(args.lines)
    if not mrc and not cfg:
        print("plot_bench: no emc-bench lines in " + ", ".join(args.lines), file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    written = []
    keys = sorted({trace_key(o) for o in mrc + cfg}, key=str)
    for key in keys:
        m = [o for o in mrc if trace_key(o) == key]
        c = [o for o in cfg if trace_key(o) == key]
        if m or any(o.get("hit_ratio_distinct") is not None for o in c):
            written.append(plot_hit_ratio(plt, args.out, key, m, c))
    p = plot_lookups(plt, args.out, cfg)
    if p:
        written.append(p)
    for w in written:
        print(f"plot_bench: wrote {w}", file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
