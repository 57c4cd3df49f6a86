#!/usr/bin/env python3
"""Every library source that asks for a software prefetch gets one in its object code.

usage: check_prefetch.py OBJDUMP LIBRARY.a SRC_DIR

GCC judges a function whose only effects are prefetches to be pure and deletes calls to it
whose result is unused (12.2, -O1 and up): inline admission's admit_prefetch (lib/admit_host.c)
compiled to nothing until it was made always_inline. This check reads the static library's
disassembly and fails when an object built from a file under SRC_DIR/lib that calls
__builtin_prefetch holds no prefetch instruction (x86-64: prefetch*, aarch64: prfm).
Exit 77 (skipped) where neither instruction set applies or objdump cannot read the archive.
It checks objects, not helpers: a file with prefetches of its own besides a helper's (read_pipe.c)
passes even if the helper's calls were deleted, which is why every prefetch-only helper is
always_inline. Prefetches in headers are not checked.
"""
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    objdump, archive, src = sys.argv[1:]
    wanted = {}
    for root, _, files in os.walk(os.path.join(src, "lib")):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    n = len(re.findall(r"__builtin_prefetch\s*\(", fh.read()))
                if n:
                    wanted[f + ".o"] = n
    if not wanted:
        print("check_prefetch: no library source asks for a prefetch", file=sys.stderr)
        return 1
    try:
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", archive], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_prefetch: SKIP: {objdump} -d {archive}: {e}")
        return 77
    fmt = re.search(r"file format (\S+)", out)
    if not fmt or not re.search(r"x86-64|aarch64|arm64", fmt.group(1)):
        print(f"check_prefetch: SKIP: {fmt.group(1) if fmt else 'unknown format'}")
        return 77
    insn = re.compile(r"^\s*[0-9a-f]+:\s+(prefetch\w*|prfm)\b", re.M)
    counts, member = {}, None
    for line in out.splitlines():
        # GNU objdump: "alloc.c.o:     file format ..."; llvm-objdump: "lib.a(alloc.c.o): ..."
        m = re.match(r"^(?:\S*\()?([^()\s]+\.o)\)?:\s+file format", line)
        if m:
            member = os.path.basename(m.group(1))
            counts.setdefault(member, 0)
        elif member and insn.match(line):
            counts[member] += 1
    bad = 0
    for obj, n_src in sorted(wanted.items()):
        got = counts.get(obj)
        if got is None:
            print(f"check_prefetch: {obj} is not in {archive}", file=sys.stderr)
            bad = 1
        elif got == 0:
            print(f"check_prefetch: {obj}: the source calls __builtin_prefetch {n_src} times, "
                  "the object holds no prefetch instruction (a prefetch-only helper judged pure "
                  "and deleted? make it always_inline)", file=sys.stderr)
            bad = 1
        else:
            print(f"check_prefetch: {obj}: {got} prefetch instructions ({n_src} in the source)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
