"""python3 -m embcache [LIBRARY]: load the library and say which one and its allocator."""

import sys

from ._capi import host_allocator, load, version

lib = load(sys.argv[1] if len(sys.argv) > 1 else None)
print(f"embcache {version()} from {lib._name}\nhost allocator: {host_allocator()}")
