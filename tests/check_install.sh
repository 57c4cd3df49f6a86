#!/usr/bin/env bash
# check_install.sh: install embcache into a scratch prefix and use it from outside, the ways
# README's "Use it from your project" shows. Run by CTest (test check_install):
#
#   check_install.sh BUILD_DIR SOURCE_DIR WORK_DIR WITH_CUDA PYTHON
#
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix
#   2. tests/consumer built and run five ways:
#        cmake-shared   find_package(embcache) + embcache::embcache
#        cmake-static   find_package(embcache) + embcache::embcache_static
#        pkgconf-shared cc consumer.c $(pkg-config --cflags --libs embcache)
#        pkgconf-static cc consumer.c ... -Wl,-Bstatic -lembcache -Wl,-Bdynamic
#                         $(pkg-config --static --libs embcache)
#        subdir         add_subdirectory(SOURCE_DIR) + embcache::embcache: without a build
#                       type, which embcache must not set for its parent, and whose
#                       cmake --install installs none of embcache's files
#      each must look its batch up with every row right and use jemalloc (the consumer links
#      it through the package, so it is loaded at start-up); the static ones must not load
#      libembcache.so, the shared ones must.
#   3. ctypes.CDLL of the installed libembcache.so in a fresh environment (env -i).
# The build's CUDA setting (WITH_CUDA) is what the installed package carries; the consumer
# builds check it reached embcacheConfig.cmake.
set -euo pipefail

build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); work=$3; with_cuda=$4; python=$5
cmake_bin=${CMAKE_COMMAND:-cmake}
cc_bin=${CC:-cc}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
log() { printf '[check_install] %s\n' "$*"; }

log "install into $prefix"
"$cmake_bin" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/embcache.h lib/libembcache.so lib/libembcache.a lib/pkgconfig/embcache.pc \
         lib/cmake/embcache/embcacheConfig.cmake lib/cmake/embcache/embcacheConfigVersion.cmake \
         lib/cmake/embcache/embcacheTargets.cmake; do
  [[ -e "$prefix/$f" ]] || { log "missing after install: $f"; exit 1; }
done
if readelf -dW "$prefix/lib/libembcache.so" | grep -q 'NEEDED.*jemalloc'; then
  log "libembcache.so has a DT_NEEDED on jemalloc: dlopen() would fail (static TLS)"; exit 1
fi

run_consumer() {  # run_consumer NAME BINARY LINK(shared|static)
  local name=$1 bin=$2 link=$3 needed
  needed=$(readelf -dW "$bin" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  if [[ $link == static && $needed == *libembcache* ]]; then
    log "$name: links libembcache.so ($needed)"; return 1
  fi
  if [[ $link == shared && $needed != *libembcache* ]]; then
    log "$name: does not link libembcache.so ($needed)"; return 1
  fi
  if [[ $needed != *libjemalloc* ]]; then
    log "$name: jemalloc is not loaded at start-up ($needed)"; return 1
  fi
  "$bin" --expect-allocator jemalloc | sed "s/^/[check_install] $name: /"
}

for use in shared static; do
  log "cmake-$use: find_package(embcache) + embcache::embcache$([[ $use == static ]] && echo _static)"
  "$cmake_bin" -S "$src/tests/consumer" -B "$work/cmake-$use" -DEMBCACHE_USE=$use \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/cmake-$use.log" 2>&1 ||
    { cat "$work/cmake-$use.log"; exit 1; }
  grep -q "consumer: embcache .* CUDA $with_cuda" "$work/cmake-$use.log" ||
    { grep consumer: "$work/cmake-$use.log"; log "embcache_WITH_CUDA is not $with_cuda"; exit 1; }
  "$cmake_bin" --build "$work/cmake-$use" >>"$work/cmake-$use.log" 2>&1 ||
    { cat "$work/cmake-$use.log"; exit 1; }
  run_consumer "cmake-$use" "$work/cmake-$use/consumer" $use
done

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
log "pkgconf-shared: cc consumer.c \$(pkg-config --cflags --libs embcache)"
# shellcheck disable=SC2046  # word splitting of pkg-config's flags is intended
"$cc_bin" -Wall -Wextra -Werror "$src/tests/consumer/consumer.c" -o "$work/pkgconf-shared" \
  $(pkg-config --cflags --libs embcache) -Wl,-rpath,"$prefix/lib"
run_consumer pkgconf-shared "$work/pkgconf-shared" shared

log "pkgconf-static: cc consumer.c -Wl,-Bstatic -lembcache -Wl,-Bdynamic \$(pkg-config --static --libs embcache)"
# shellcheck disable=SC2046
"$cc_bin" -Wall -Wextra -Werror "$src/tests/consumer/consumer.c" -o "$work/pkgconf-static" \
  $(pkg-config --cflags embcache) -L"$prefix/lib" -Wl,-Bstatic -lembcache -Wl,-Bdynamic \
  -Wl,--as-needed $(pkg-config --static --libs embcache)
run_consumer pkgconf-static "$work/pkgconf-static" static

log "subdir: add_subdirectory($src) + embcache::embcache"
"$cmake_bin" -S "$src/tests/consumer" -B "$work/subdir" -DEMBCACHE_USE=subdir \
  -DEMBCACHE_SOURCE_DIR="$src" -DEMC_WITH_CUDA="$with_cuda" \
  >"$work/subdir.log" 2>&1 || { cat "$work/subdir.log"; exit 1; }
grep -q "consumer: build type after add_subdirectory: ''" "$work/subdir.log" ||
  { grep "consumer: build type" "$work/subdir.log"; log "subdir: embcache set its parent's build type"; exit 1; }
"$cmake_bin" --build "$work/subdir" -j 2 >>"$work/subdir.log" 2>&1 || { cat "$work/subdir.log"; exit 1; }
run_consumer subdir "$work/subdir/consumer" shared
"$cmake_bin" --install "$work/subdir" --prefix "$work/subdir-prefix" >>"$work/subdir.log" 2>&1
if [[ -n $(find "$work/subdir-prefix" -type f 2>/dev/null | head -1) ]]; then
  find "$work/subdir-prefix" -type f | head -5
  log "subdir: the parent's cmake --install installed embcache's files (EMC_INSTALL is off)"; exit 1
fi

log "python: ctypes.CDLL($prefix/lib/libembcache.so) under env -i"
env -i PATH=/usr/bin:/bin "$python" -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.emc_host_allocator.restype = ctypes.c_char_p
print("[check_install] python: loaded; host allocator:", lib.emc_host_allocator().decode())
' "$prefix/lib/libembcache.so"

plugin=$work/cmake-shared/libconsumer_plugin.so
log "plugin: a module linked with embcache::embcache and EMBCACHE_NO_JEMALLOC, dlopen()ed"
if readelf -dW "$plugin" | grep -q 'NEEDED.*jemalloc'; then
  log "plugin: EMBCACHE_NO_JEMALLOC did not keep jemalloc out"; exit 1
fi
env -i PATH=/usr/bin:/bin "$python" -c '
import ctypes, sys
plugin = ctypes.CDLL(sys.argv[1])
sys.stdout.flush()
rc = plugin.main(0, None)  # the consumer, run inside the interpreter
sys.exit(rc)
' "$plugin" | sed "s/^/[check_install] plugin: /"
log "all ok"
