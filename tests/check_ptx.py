#!/usr/bin/env python3
"""check_ptx: what the CUDA lookup path costs, read from the compiler (no GPU needed).

Compiles every cuda/*.cu that defines kernels for sm_90 (-O3) to a cubin with ptxas -v, keeping
the PTX (one nvcc run per file, two at a time), then, for every kernel whose name contains
"lookup":
  - counts the fence / membar / ld.acquire instructions in its PTX: at most 2 (the reader
    protocol's two fences per tile; an acquire load or fence per row or per probed key would
    be an L1 invalidation each on sm_90);
  - reads ptxas's spill stores and loads: 0.
Every other kernel's figures are printed too (they do not fail the check). Exits 1 on a
violation or when no lookup kernel is found.

usage: check_ptx.py --nvcc PATH --src DIR [--arch sm_90]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^\s*(?:@!?%p\d+\s+)?(fence\.|membar\.|ld\.acquire)", re.M)


def ptx_entries(ptx):
    """{kernel: body} for every .entry of a PTX file."""
    out = {}
    for m in re.finditer(r"\.entry\s+([A-Za-z0-9_$]+)\s*\((.*?)^\}", ptx, re.S | re.M):
        out[m.group(1)] = m.group(0)
    return out


def spills(log):
    """{kernel: (regs, stack, spill_st, spill_ld)} from ptxas -v output."""
    out, cur, stack, st, ld = {}, None, 0, 0, 0
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            stack, st, ld = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur] = (int(m.group(1)), stack, st, ld)
            cur = None
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args()
    inc = ["-I" + os.path.join(a.src, d) for d in ("include", "lib", "cuda")]
    files = sorted(glob.glob(os.path.join(a.src, "cuda", "*.cu")))
    if not files:
        print("check_ptx: no cuda/*.cu under", a.src)
        return 1
    # only files that define kernels (the others hold host code: nothing to read); one nvcc
    # run each (the cubin with ptxas -v, the PTX kept beside it), two at a time
    files = [f for f in files if "__global__" in open(f).read()]
    bad, lookups = [], 0
    rows = []

    def compile_one(f, tmp):
        keep = tempfile.mkdtemp(dir=tmp)
        cmd = [a.nvcc, "-arch=" + a.arch, "-O3"] + inc + ["-cubin", "-Xptxas", "-v", "--keep",
                                                          "--keep-dir", keep, f, "-o",
                                                          os.path.join(keep, "out.cubin")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        ptx = ""
        if r.returncode == 0:
            for name in sorted(os.listdir(keep)):
                if name.endswith(".ptx"):
                    with open(os.path.join(keep, name)) as fh:
                        ptx += fh.read()
        return f, r, ptx

    with tempfile.TemporaryDirectory() as tmp:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as ex:
            done = list(ex.map(lambda f: compile_one(f, tmp), files))
        for f, r2, ptx in done:
            if r2.returncode != 0 or not ptx:
                print(r2.stdout, r2.stderr)
                print("check_ptx: nvcc -cubin failed (or kept no PTX) for", f)
                return 1
            entries = ptx_entries(ptx)
            sp = spills(r2.stdout + r2.stderr)
            for name, body in sorted(entries.items()):
                fences = len(FENCE.findall(body))
                regs, stack, st, ld = sp.get(name, (-1, 0, 0, 0))
                is_lookup = "lookup" in name
                rows.append((os.path.basename(f), name, fences, regs, st, ld, is_lookup))
                if is_lookup:
                    lookups += 1
                    if fences > 2:
                        bad.append("%s: %d fence/membar/ld.acquire instructions (at most 2)" % (name, fences))
                    if st or ld:
                        bad.append("%s: %d bytes of spill stores, %d of spill loads (none allowed)" % (name, st, ld))
    print("%-14s %-48s %7s %5s %12s" % ("file", "kernel", "fences", "regs", "spill st/ld"))
    for fn, name, fences, regs, st, ld, is_lookup in rows:
        print("%-14s %-48s %7d %5d %6d/%-5d%s" % (fn, name[:48], fences, regs, st, ld, "  <- lookup" if is_lookup else ""))
    if lookups == 0:
        print("check_ptx: no kernel named *lookup* in cuda/*.cu")
        return 1
    for b in bad:
        print("check_ptx: FAIL", b)
    if not bad:
        print("check_ptx: %d lookup kernel(s): at most 2 fences, no spills" % lookups)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
