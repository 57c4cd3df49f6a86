#!/usr/bin/env python3
"""Every line of README.md's C snippets must appear, in order, in tests/test_readme.c, so the
snippets users copy are the ones the test suite compiles and runs."""
import re
import sys

readme, test = sys.argv[1], sys.argv[2]
blocks = re.findall(r"```c\n(.*?)```", open(readme).read(), re.S)
test_lines = [l.strip() for l in open(test).read().splitlines()]
if len(blocks) < 2:
    sys.exit(f"{readme}: expected the two C snippets, found {len(blocks)}")
for b in blocks:
    pos = 0
    for line in (l.strip() for l in b.splitlines()):
        if not line:
            continue
        try:
            pos = test_lines.index(line, pos) + 1
        except ValueError:
            sys.exit(f"README snippet line not in {test} (in order): {line!r}")
print(f"check_readme: {len(blocks)} snippets match {test}")
