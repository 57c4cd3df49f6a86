#!/usr/bin/env python3
"""The cache bench's contract, on small host-backend workloads: exit 0, one JSON object per
configuration on stdout, the same lines appended to --out, the fields a reader of the line
relies on with consistent values; --all-hit really is all hits.

usage: check_bench.py EMC_BENCH_BINARY
"""
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
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
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
    for k in ("bench", "version", "preset", "backend", "lookups", "hits", "hit_ratio",
              "lookups_per_s", "bytes_in_use", "capacity_bytes", "rows_ok"):
        check(k in o, f"{what}: field {k} missing")
    if failures:
        return
    check(o["bench"] == "emc-bench", f"{what}: bench = {o['bench']!r}")
    check(o["backend"] == "host", f"{what}: backend = {o['backend']!r}")
    check(o["rows_ok"] is True, f"{what}: rows_ok = {o['rows_ok']!r}")
    check(o["lookups"] == o["batch"] * o["batches"] * o["tables"],
          f"{what}: lookups {o['lookups']} != batch*batches*tables")
    check(0 <= o["hits"] <= o["lookups"], f"{what}: hits {o['hits']} outside [0, lookups]")
    check(abs(o["hit_ratio"] - o["hits"] / o["lookups"]) < 1e-5,
          f"{what}: hit_ratio {o['hit_ratio']} != hits/lookups")
    check(o["lookups_per_s"] > 0, f"{what}: lookups_per_s {o['lookups_per_s']}")
    check(o["bytes_in_use"] <= o["t1"] * o["capacity_bytes"] + 1,
          f"{what}: bytes_in_use {o['bytes_in_use']} above t1 * capacity")


def main():
    if len(sys.argv) != 2:
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

    for m in failures:
        print("FAIL:", m)
    if failures:
        sys.exit(1)
    print("check_bench: OK")


if __name__ == "__main__":
    main()
