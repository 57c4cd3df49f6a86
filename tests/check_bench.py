#!/usr/bin/env python3
"""The cache bench's contract, on small host-backend workloads: exit 0, one JSON object per
configuration on stdout, the same lines appended to --out, the fields a reader of the line
relies on with consistent values; --all-hit really is all hits; -h is --help.

--prewarm: a "prewarm" object on the criteo-kaggle preset (small scale) with its fields, hit
ratios in [0, 1], the warmed cache hitting at least as often as the cold one on the batches
after the sample, and the warmed bytes within the budget (t2 * capacity_bytes).

Sizing mode (--mrc, --sweep-batch, --plot): the stack-distance curve at the configured sizes
equals the exact LRU simulation's hit ratio on the same trace (mrc_lru_hit_ratio_t2/_t1 ==
lru_hit_ratio_t2/_t1, and the "t2"/"t1" curve lines agree), OPT >= LRU at every size where
OPT is computed, both curves are monotone and end at 1 - cold_misses / accesses, one trace per
batch size, and --plot writes valid PNG files (signature checked). The PNG part is skipped,
saying so, only when matplotlib cannot be imported (make deps installs it).

Training (--train): every configuration line carries a "train" object (the steps prefetch(i+1)
-> lookup(i) -> backward -> apply(i) through a cache, and the same steps without one, in the
same run): its keys, 0 <= hit_ratio_after_prefetch <= 1, steps/s > 0, speedup = the ratio of
the two rates; where the prefetch window fitted (pin_shortfall == 0) every present position of
every measured lookup hit (hit_ratio_after_prefetch == 1.0), and where it did not the prefetch
said so (EMC_ECAPACITY counted); the store trained through the cache equals, bitwise, the one
trained directly (f32 and f16). A bad --prefetch-depth is a usage error.

--procs 2: the shared-store line and the private-stores line, every checked row right, the
machine's memory with one shared store below the private stores' and within 1.1x of one store
plus the processes' own memory (not under a sanitizer, whose shadow memory each process holds).

The command line (command_line): decimal integers, options that need another or that the
run would ignore refused, t1/t2 as floats, a --scale past 2^40 rows, exit 74 when the results
cannot be written, --procs ending when workers fail before the start, a --plot folder named
like an option.

What a new user trips over: --backend auto says which backend it picked and why
(backend_reason, and a stderr line); with EMC_BENCH_GPU given, emc-bench-gpu -h works and,
with no device visible (CUDA_VISIBLE_DEVICES=""), it exits 77 saying why ("no NVIDIA driver
found" where this machine has none).

usage: check_bench.py EMC_BENCH_BINARY [EMC_BENCH_GPU_BINARY]
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def run(binary, args, out_path):
    cmd = [binary, "--backend", "host", "--out", out_path] + args
    # --plot runs plot_bench.py with this interpreter (the one that has matplotlib)
    env = dict(os.environ, EMC_BENCH_PYTHON=sys.executable)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600,
                       env=env)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stderr}")
    lines = p.stdout.splitlines()
    objs = []
    for ln in lines:
        try:
            objs.append(json.loads(ln))
        except json.JSONDecodeError as e:
            sys.exit(f"FAIL: {' '.join(cmd)}: stdout line is not JSON ({e}): {ln[:200]}")
    return lines, objs


def common(o, what):
    for k in ("bench", "version", "preset", "backend", "backend_requested", "backend_reason",
              "host_allocator", "lookups", "hits", "hit_ratio", "lookups_per_s", "bytes_in_use",
              "capacity_bytes", "rows_ok"):
        check(k in o, f"{what}: field {k} missing")
    if failures:
        return
    check(o["bench"] == "emc-bench", f"{what}: bench = {o['bench']!r}")
    check(o["backend"] == "host", f"{what}: backend = {o['backend']!r}")
    check(o["backend_requested"] == "host" and o["backend_reason"].startswith("requested"),
          f"{what}: backend_requested {o['backend_requested']!r}, reason {o['backend_reason']!r}")
    want = os.environ.get("EMC_TEST_EXPECT_ALLOCATOR", "jemalloc")  # "system" under ASan
    check(o["host_allocator"].startswith(want),
          f"{what}: host_allocator {o['host_allocator']!r}, want {want} (a C program linked "
          "like emc-bench loads jemalloc at start-up)")
    check(o["rows_ok"] is True, f"{what}: rows_ok = {o['rows_ok']!r}")
    check(o["lookups"] == o["batch"] * o["batches"] * o["tables"],
          f"{what}: lookups {o['lookups']} != batch*batches*tables")
    check(0 <= o["hits"] <= o["lookups"], f"{what}: hits {o['hits']} outside [0, lookups]")
    check(abs(o["hit_ratio"] - o["hits"] / o["lookups"]) < 1e-5,
          f"{what}: hit_ratio {o['hit_ratio']} != hits/lookups")
    check(o["lookups_per_s"] > 0, f"{what}: lookups_per_s {o['lookups_per_s']}")
    check(o["bytes_in_use"] <= o["t1"] * o["capacity_bytes"] + 1,
          f"{what}: bytes_in_use {o['bytes_in_use']} above t1 * capacity")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sizing(binary, d, small):
    out = os.path.join(d, "mrc.jsonl")
    plot_dir = os.path.join(d, "plots")
    have_mpl = subprocess.run([sys.executable, "-c", "import matplotlib"],
                              capture_output=True).returncode == 0
    args = small + ["--sweep-cache", "0.02,0.1", "--sweep-batch", "256,512", "--mrc",
                    "--mrc-points", "30", "--mrc-opt-points", "6"]
    if have_mpl:
        args += ["--plot", plot_dir]
    _, objs = run(binary, args, out)
    cfg = [o for o in objs if o.get("record") != "mrc"]
    mrc = [o for o in objs if o.get("record") == "mrc"]
    check(len(cfg) == 4, f"--mrc with 2 cache sizes x 2 batch sizes gave {len(cfg)} config lines")
    check(sorted({o["batch"] for o in cfg}) == [256, 512], "--sweep-batch: batches not 256, 512")
    for o in cfg:
        common(o, f"mrc config batch {o.get('batch')} frac {o.get('cache_frac')}")
        for t in ("t2", "t1"):
            check(o.get(f"mrc_lru_hit_ratio_{t}") == o.get(f"lru_hit_ratio_{t}"),
                  f"batch {o['batch']}, frac {o['cache_frac']}: curve at {t} "
                  f"{o.get(f'mrc_lru_hit_ratio_{t}')} != exact LRU simulation "
                  f"{o.get(f'lru_hit_ratio_{t}')}")
            check(o.get(f"opt_hit_ratio_{t}") is not None and
                  o[f"opt_hit_ratio_{t}"] >= o[f"lru_hit_ratio_{t}"],
                  f"batch {o['batch']}: OPT at {t} below LRU")
    for batch in (256, 512):
        lines = [o for o in mrc if o["batch"] == batch]
        confs = [o for o in cfg if o["batch"] == batch]
        check(len(lines) >= 30, f"batch {batch}: {len(lines)} curve lines")
        at = [o for o in lines if o["at"] in ("t2", "t1")]
        check(len(at) == 2 * len(confs), f"batch {batch}: {len(at)} t2/t1 lines")
        for c, (l2, l1) in zip(confs, zip(at[0::2], at[1::2])):
            check(l2["at"] == "t2" and l1["at"] == "t1", f"batch {batch}: t2/t1 order")
            check(l2["lru_hit_ratio"] == c["lru_hit_ratio_t2"] and
                  l1["lru_hit_ratio"] == c["lru_hit_ratio_t1"],
                  f"batch {batch}: t2/t1 curve lines disagree with the config line")
        grid = sorted((o for o in lines if o["at"] == "grid"), key=lambda o: o["cache_rows"])
        pts = sorted(lines, key=lambda o: o["cache_rows"])
        for a, b in zip(pts, pts[1:]):
            check(a["lru_hit_ratio"] <= b["lru_hit_ratio"], f"batch {batch}: LRU curve decreases")
        opt = [o for o in pts if o["opt_hit_ratio"] is not None]
        check(len(opt) >= 6, f"batch {batch}: OPT at only {len(opt)} sizes")
        for o in opt:
            check(o["opt_hit_ratio"] >= o["lru_hit_ratio"],
                  f"batch {batch}, {o['cache_rows']} rows: OPT {o['opt_hit_ratio']} < LRU "
                  f"{o['lru_hit_ratio']}")
        for a, b in zip(opt, opt[1:]):
            check(a["opt_hit_ratio"] <= b["opt_hit_ratio"], f"batch {batch}: OPT decreases")
        if grid:
            top = grid[-1]
            want = 1 - top["cold_misses"] / top["accesses"]
            check(top["cache_rows"] == top["lru_saturation_rows"] and
                  abs(top["lru_hit_ratio"] - want) < 1e-5,
                  f"batch {batch}: curve ends at {top['lru_hit_ratio']}, want {want}")
            check(top["opt_hit_ratio"] is not None and abs(top["opt_hit_ratio"] - want) < 1e-5,
                  f"batch {batch}: OPT at saturation {top['opt_hit_ratio']}, want {want}")
    if not have_mpl:
        print("check_bench: NOTE: PNG checks skipped: matplotlib cannot be imported by "
              f"{sys.executable} (make deps installs it)")
        return
    pngs = sorted(f for f in os.listdir(plot_dir) if f.endswith(".png"))
    check(len([f for f in pngs if f.startswith("hit_ratio_vs_cache_")]) == 2,
          f"--plot: hit-ratio PNGs {pngs}")
    check("lookups_per_s_vs_batch.png" in pngs, f"--plot: no lookups_per_s_vs_batch.png in {pngs}")
    for f in pngs:
        with open(os.path.join(plot_dir, f), "rb") as fh:
            head = fh.read(8)
        check(head == PNG_SIGNATURE, f"--plot: {f} is not a PNG (starts {head!r})")
        check(os.path.getsize(os.path.join(plot_dir, f)) > 1000, f"--plot: {f} is tiny")


def prewarm(binary, out):
    args = ["--scale", "0.01", "--batch", "1024", "--batches", "4", "--warmup", "2",
            "--no-lru-check", "--no-per-table", "--prewarm", "--prewarm-sample", "16",
            "--prewarm-batches", "8"]
    _, objs = run(binary, args, out)
    check(len(objs) == 1, f"--prewarm gave {len(objs)} lines")
    if not objs:
        return
    o = objs[0]
    common(o, "prewarm")
    w = o.get("prewarm")
    check(isinstance(w, dict), f"--prewarm: no prewarm object ({w!r})")
    if not isinstance(w, dict):
        return
    keys = ("sample_batches", "measure_batches", "sample_keys", "budget_bytes", "plan_rows", "rows",
            "bytes", "warm_admit_skipped", "warm_evictions", "measure_lookups", "hit_ratio_cold",
            "hit_ratio_warm", "hit_ratio_replay", "plan_s", "apply_s", "replay_s", "rows_ok")
    for k in keys:
        check(k in w, f"--prewarm: field {k} missing")
    if failures:
        return
    for k in ("hit_ratio_cold", "hit_ratio_warm", "hit_ratio_replay"):
        check(isinstance(w[k], (int, float)) and 0 <= w[k] <= 1, f"--prewarm: {k} = {w[k]!r}")
    if failures:
        return
    check(w["hit_ratio_warm"] >= w["hit_ratio_cold"],
          f"--prewarm: the warmed cache hits less ({w['hit_ratio_warm']}) than the cold one "
          f"({w['hit_ratio_cold']}) on the batches after the sample")
    check(0 < w["bytes"] <= w["budget_bytes"],
          f"--prewarm: warmed {w['bytes']} bytes, budget {w['budget_bytes']}")
    check(abs(w["budget_bytes"] - o["t2"] * o["capacity_bytes"]) <= 1 + 1e-6 * o["capacity_bytes"],
          f"--prewarm: budget {w['budget_bytes']} is not t2 * capacity_bytes")
    check(w["sample_batches"] == 16 and w["measure_batches"] == 8,
          f"--prewarm: sample {w['sample_batches']}, measured {w['measure_batches']}")
    check(w["measure_lookups"] == 8 * o["batch"] * o["tables"],
          f"--prewarm: {w['measure_lookups']} lookups measured, want 8 batches of {o['batch']} x "
          f"{o['tables']}")
    # dense tables: every planned row is admitted, nothing evicted while warming, and the
    # budget (below the sample's distinct rows here) is what limits the plan
    check(w["rows"] == w["plan_rows"] and 0 < w["rows"] < w["sample_keys"],
          f"--prewarm: rows {w['rows']}, plan_rows {w['plan_rows']}, sample_keys {w['sample_keys']}")
    check(w["warm_evictions"] == 0 and w["warm_admit_skipped"] == 0,
          f"--prewarm: warming evicted {w['warm_evictions']}, skipped {w['warm_admit_skipped']}")
    check(w["rows_ok"] is True, "--prewarm: the warmed cache returned wrong rows")
    check(w["plan_s"] >= 0 and w["apply_s"] >= 0, "--prewarm: negative times")
    p = subprocess.run([binary, "--prewarm-batches", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 64, f"--prewarm-batches 0: exit {p.returncode}, want 64")


TRAIN_KEYS = ("steps", "steps_per_s", "baseline_steps_per_s", "speedup",
              "hit_ratio_after_prefetch", "prefetch_capacity_errors", "pin_shortfall",
              "prefetch_depth", "batch", "warmup_steps", "lookups", "lookups_present",
              "lookup_hits", "prefetch_calls", "gradient_rows", "prefetched", "apply_refused",
              "rows_compared", "rows_differ", "stores_equal")


def train(binary, d, small):
    out = os.path.join(d, "train.jsonl")
    # a cache too small for the prefetch window (0.005: pins fall short, EMC_ECAPACITY) and
    # one that holds it (0.1)
    _, objs = run(binary, small + ["--no-lru-check", "--train", "--sweep-cache", "0.005,0.1"],
                  out)
    _, f16 = run(binary, small + ["--no-lru-check", "--train", "--dtype", "f16",
                                  "--prefetch-depth", "2"], out)
    check(len(objs) == 2 and len(f16) == 1, f"--train gave {len(objs)} + {len(f16)} lines")
    fitted = 0
    for o in objs + f16:
        what = f"train, frac {o.get('cache_frac')}, {o.get('dtype')}"
        common(o, what)
        t = o.get("train")
        check(isinstance(t, dict), f"{what}: no train object")
        if not isinstance(t, dict):
            continue
        missing = [k for k in TRAIN_KEYS if k not in t]
        check(not missing, f"{what}: train keys missing: {missing}")
        if missing:
            continue
        check(t["steps"] == o["batches"] and t["warmup_steps"] == o["warmup"] and
              t["batch"] == o["batch"], f"{what}: steps/warm-up/batch {t['steps']}, "
              f"{t['warmup_steps']}, {t['batch']} not the bench's")
        check(t["prefetch_depth"] == (2 if o["dtype"] == "f16" else 1),
              f"{what}: prefetch_depth {t['prefetch_depth']}")
        h = t["hit_ratio_after_prefetch"]
        check(h is not None and 0 <= h <= 1, f"{what}: hit_ratio_after_prefetch {h}")
        check(t["steps_per_s"] > 0 and t["baseline_steps_per_s"] > 0,
              f"{what}: steps/s {t['steps_per_s']}, baseline {t['baseline_steps_per_s']}")
        check(abs(t["speedup"] - t["steps_per_s"] / t["baseline_steps_per_s"]) <=
              1e-4 * t["speedup"], f"{what}: speedup {t['speedup']} is not the ratio")
        check(t["lookups"] == o["lookups"] and t["lookups_present"] == t["lookups"],
              f"{what}: lookups {t['lookups']}, present {t['lookups_present']} (dense tables)")
        check(t["prefetch_calls"] == o["warmup"] + o["batches"] + 1,
              f"{what}: {t['prefetch_calls']} prefetch calls (a prologue + one per step)")
        # host backend: a prefetch whose rows did not all get pinned says so at once
        check((t["pin_shortfall"] > 0) == (t["prefetch_capacity_errors"] > 0),
              f"{what}: pin_shortfall {t['pin_shortfall']} but {t['prefetch_capacity_errors']} "
              "EMC_ECAPACITY prefetches")
        if t["pin_shortfall"] == 0:
            fitted += 1
            check(h == 1.0 and t["lookup_hits"] == t["lookups_present"],
                  f"{what}: the prefetch window fitted (pin_shortfall 0) but the lookups after "
                  f"it hit {t['lookup_hits']} of {t['lookups_present']}")
            check(t["gradient_rows"] > 0 and t["apply_refused"] == 0,
                  f"{what}: gradient_rows {t['gradient_rows']}, apply_refused {t['apply_refused']}")
        check(t["stores_equal"] is True and t["rows_differ"] == 0 and
              t["rows_compared"] == o["total_rows"],
              f"{what}: the cache-trained store differs from the directly trained one in "
              f"{t['rows_differ']} of {t['rows_compared']} rows")
    check(fitted >= 2, f"--train: only {fitted} configurations had a fitting prefetch window")
    check(any(o.get("train", {}).get("pin_shortfall", 0) > 0 for o in objs),
          "--train --cache-frac 0.005: expected the prefetch window not to fit")
    p = subprocess.run([binary, "--train", "--prefetch-depth", "15"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 64 and "--prefetch-depth" in p.stderr,
          f"--prefetch-depth 15: exit {p.returncode}, {p.stderr[:80]!r}")


def procs(binary, d):
    """--procs 2: a shared-mode and a private-mode line, every checked row right, the machine's
    memory over one shared store below the private stores' (each holds a copy), figures > 0."""
    out = os.path.join(d, "procs.jsonl")
    _, lines = run(binary, ["--procs", "2", "--scale", "0.005", "--batch", "512", "--batches", "4",
                         "--warmup", "2"], out)
    check(len(lines) == 2 and [o.get("mode") for o in lines] == ["shared", "private"],
          f"--procs: lines {[o.get('mode') for o in lines]}")
    if len(lines) != 2:
        return
    sh, pv = lines
    for o in lines:
        check(o["record"] == "procs" and o["procs"] == 2 and o["rows_checked_wrong"] == 0,
              f"--procs {o['mode']}: record {o['record']}, wrong rows {o['rows_checked_wrong']}")
        check(o["machine_lookups_per_s"] > 0 and len(o["rss_anon_kb"]) == 2,
              f"--procs {o['mode']}: lookups/s {o['machine_lookups_per_s']}")
    check(sh["segment_bytes"] >= sh["store_bytes"] and pv["segment_bytes"] == 0,
          f"--procs: segment bytes {sh['segment_bytes']} / {pv['segment_bytes']}")
    if sh.get("sanitizer", "none") != "none":  # its shadow memory is each process's own
        return
    check(sh["machine_resident_kb"] < pv["machine_resident_kb"],
          f"--procs: a shared store takes {sh['machine_resident_kb']} kB on the machine, private "
          f"stores {pv['machine_resident_kb']} kB")
    check(sh["machine_resident_over_one_store"] <= 1.1,
          f"--procs: shared store at {sh['machine_resident_over_one_store']} x one store plus "
          f"the processes' own memory (want <= 1.1)")


def driver_present():
    """Whether an NVIDIA driver could answer here (its device node tree or its library)."""
    if os.path.exists("/proc/driver/nvidia"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def auto_backend(binary, small):
    p = subprocess.run([binary, "--backend", "auto"] + small, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    check(p.returncode == 0, f"--backend auto exited {p.returncode}: {p.stderr[-500:]}")
    if p.returncode != 0:
        return
    o = json.loads(p.stdout.splitlines()[0])
    why = o.get("backend_reason", "")
    check(o.get("backend_requested") == "auto" and why.startswith("auto: "),
          f"auto: backend_requested {o.get('backend_requested')!r}, reason {why!r}")
    check(f"emc-bench: backend {o.get('backend')} (auto: " in p.stderr,
          "auto: no stderr line says which backend AUTO picked and why")
    if o.get("backend") == "host":
        check("no CUDA device" in why or "built without CUDA" in why, f"auto -> host: {why!r}")
        if "no CUDA device" in why and not driver_present():
            check("no NVIDIA driver found" in why, f"no driver here, but the reason is {why!r}")


def bench_gpu(gpu):
    p = subprocess.run([gpu, "-h"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    check(p.returncode == 0 and p.stdout.startswith("usage: emc-bench-gpu") and
          "--train" in p.stdout, f"emc-bench-gpu -h: exit {p.returncode}")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    p = subprocess.run([gpu, "--skip-criteo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120, env=env)
    check(p.returncode == 77, f"emc-bench-gpu without a device: exit {p.returncode}, want 77")
    pt = subprocess.run([gpu, "--train", "--train-steps", "3"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    check(pt.returncode == 77 and pt.stdout == "",
          f"emc-bench-gpu --train without a device: exit {pt.returncode}, want 77")
    check("no CUDA device answers" in p.stderr and p.stdout == "",
          f"emc-bench-gpu without a device: {p.stderr.strip()!r}")
    if not driver_present():
        check("no NVIDIA driver found" in p.stderr,
              f"emc-bench-gpu with no driver installed: {p.stderr.strip()!r}")


def command_line(binary, d, small):
    """What the command line promises beyond the option list: integers are decimal (no octal
    "010", hex or sign), an option that needs another or that the run would ignore is bad
    usage (64), t1/t2 are judged as the floats the library gets, a --scale past 2^40 rows is
    bad usage, results that cannot be written exit 74, --procs with a failing worker ends
    (exit 2; it could wait for good), and --plot takes a folder named like an option."""
    def bench(args, **kw):
        try:
            return subprocess.run([binary] + args, stdout=kw.pop("stdout", subprocess.PIPE),
                                  stderr=subprocess.PIPE, text=True, timeout=120, **kw)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, -1, "", "timed out after 120 s")
    usage = [["--batch", "0x10"], ["--batches", "010x"], ["--seed", " -1"], ["--seed", "-1"],
             ["--mrc-points", "5"], ["--prefetch-depth", "2"], ["--prewarm-sample", "4"],
             ["--tables", "3"], ["--preset", "uniform", "--scale", "2"],
             ["--dist", "uniform", "--alpha", "2"], ["--all-hit", "--cache-frac", "0.5"],
             ["--procs", "1", "--dist", "uniform"], ["--procs", "1", "--mrc"],
             ["--procs", "1", "--threads", "2"], ["--t1", "0.8", "--t2", "0.79999999999"],
             ["--scale", "1e300"],
             ["--preset", "uniform", "--tables", "4096", "--rows", "1099511627776", "--dim",
              "65536"]]
    quick = ["--batch", "16", "--batches", "1", "--warmup", "0"]  # a short run if accepted
    for args in usage:
        p = bench(args + quick)
        check(p.returncode == 64, f"{' '.join(args)}: exit {p.returncode}, want 64 "
              f"({p.stderr.splitlines()[:1]})")
    p = bench(["-xh"])
    check(p.returncode == 64 and "unknown option -x" in p.stderr,
          f"-xh: exit {p.returncode}, {p.stderr.splitlines()[:1]}")
    _, objs = run(binary, small[:-6] + ["--batch", "010", "--batches", "2", "--warmup", "1",
                                        "--no-lru-check"], os.path.join(d, "decimal.jsonl"))
    check(len(objs) == 1 and objs[0].get("batch") == 10,
          f"--batch 010: batch {objs[0].get('batch') if objs else None}, want 10 (decimal)")
    tiny = small[:-6] + ["--batch", "16", "--batches", "2", "--warmup", "1", "--no-lru-check"]
    with open("/dev/full", "w") as full:
        p = bench(tiny, stdout=full)
    check(p.returncode == 74, f"stdout on /dev/full: exit {p.returncode}, want 74")
    p = bench(tiny + ["--out", "/dev/full"])
    check(p.returncode == 74, f"--out /dev/full: exit {p.returncode}, want 74")
    for i in range(3):  # workers failing before the start barrier used to leave it shut
        p = bench(["--procs", "8", "--preset", "uniform", "--tables", "1", "--rows", "1",
                   "--batch", "4", "--batches", "5", "--warmup", "1"])
        check(p.returncode == 2 and "--procs: worker" in p.stderr,
              f"--procs 8 with failing workers, try {i}: exit {p.returncode}, want 2")
    if subprocess.run([sys.executable, "-c", "import matplotlib"],
                      capture_output=True).returncode == 0:
        env = dict(os.environ, EMC_BENCH_PYTHON=sys.executable)
        p = bench(tiny + ["--plot", "-plots"], cwd=d, env=env)
        check(p.returncode == 0 and os.path.isdir(os.path.join(d, "-plots")),
              f"--plot -plots: exit {p.returncode}: {p.stderr[-300:]}")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.jsonl")
        small = ["--preset", "uniform", "--tables", "3", "--rows", "20000", "--dim", "8",
                 "--batch", "512", "--batches", "8", "--warmup", "4"]
        lines, objs = run(binary, small + ["--sweep-alpha", "0.8,1.2"], out)
        check(len(objs) == 2, f"sweep of 2 alphas gave {len(objs)} lines")
        for i, o in enumerate(objs):
            common(o, f"sweep line {i}")
        if len(objs) == 2 and not failures:
            check([o["alpha"] for o in objs] == [0.8, 1.2], f"alphas {[o['alpha'] for o in objs]}")
            check(objs[1]["hit_ratio"] > objs[0]["hit_ratio"],
                  "a more skewed trace (alpha 1.2) should hit more than alpha 0.8: "
                  f"{objs[1]['hit_ratio']} vs {objs[0]['hit_ratio']}")
        with open(out) as f:
            check(f.read().splitlines() == lines, "--out file differs from stdout")

        lines, objs = run(binary, small + ["--all-hit", "--dtype", "f16", "--key-bits", "32"], out)
        check(len(objs) == 1, f"--all-hit gave {len(objs)} lines")
        if objs:
            common(objs[0], "all-hit")
            check(objs[0].get("hits") == objs[0].get("lookups"), "--all-hit: not every lookup hit")
            check(objs[0].get("dtype") == "f16" and objs[0].get("key_bits") == 32,
                  "--all-hit: dtype/key_bits not echoed")
        with open(out) as f:
            check(len(f.read().splitlines()) == 3, "--out did not append")

        # the criteo-kaggle preset (small scale): index bytes per cached row within the targets
        # (16 B with 32-bit keys, 24 B with 64-bit keys) and the per-table baseline beside the
        # global cache, in the same run
        crit = ["--scale", "0.01", "--batch", "1024", "--batches", "6", "--warmup", "6",
                "--no-lru-check"]
        for kb, limit in ((32, 16.0), (64, 24.0)):
            _, objs = run(binary, crit + ["--key-bits", str(kb)], out)
            check(len(objs) == 1, f"criteo --key-bits {kb} gave {len(objs)} lines")
            if not objs:
                continue
            o = objs[0]
            common(o, f"criteo {kb}")
            for k in ("index_bytes_per_row", "per_table_hit_ratio", "per_table_lookups_per_s"):
                check(k in o, f"criteo {kb}: field {k} missing")
            if failures:
                continue
            check(0 < o["index_bytes_per_row"] <= limit,
                  f"criteo {kb}-bit keys: index_bytes_per_row {o['index_bytes_per_row']} > {limit}")
            check(0 < o["per_table_hit_ratio"] <= 1 and o["per_table_lookups_per_s"] > 0,
                  f"criteo {kb}: per-table figures {o['per_table_hit_ratio']}, {o['per_table_lookups_per_s']}")
            check(o["hit_ratio"] >= o["per_table_hit_ratio"],
                  f"criteo {kb}: the global cache hits less ({o['hit_ratio']}) than per-table "
                  f"caches of the same total budget ({o['per_table_hit_ratio']})")

        prewarm(binary, out)
        procs(binary, d)
        sizing(binary, d, small)
        train(binary, d, small)
        auto_backend(binary, small)
        command_line(binary, d, small)
    if len(sys.argv) == 3:
        bench_gpu(sys.argv[2])

    for flag in ("-h", "--help"):
        p = subprocess.run([binary, flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        check(p.returncode == 0 and p.stdout.startswith("usage: emc-bench"),
              f"{flag}: exit {p.returncode}, stdout {p.stdout[:40]!r}")

    for m in failures:
        print("FAIL:", m)
    if failures:
        sys.exit(1)
    print("check_bench: OK")


if __name__ == "__main__":
    main()
