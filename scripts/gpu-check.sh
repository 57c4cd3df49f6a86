#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA H100 (sm_90). One command:
#   scripts/gpu-check.sh                 build + run here (needs the build dependencies)
#   scripts/gpu-check.sh --package DIR   build here (no GPU needed) and put the GPU test and
#                                        bench executables, plus the shared libraries they need
#                                        (jemalloc, subunit, xxhash), under DIR
#   scripts/gpu-check.sh --prebuilt DIR  run what --package put in DIR (a GPU machine without
#                                        the build dependencies)
# Run steps:
#   1. the GPU tests (tests/gpu/test_gpu_*: the CUDA backend against the host backend)
#   2. emc-bench --backend cuda (criteo-kaggle, host buffers), then emc-bench-gpu (device
#      buffers: hit path, miss path, latency, full-scale Criteo throughput, launches)
#   3. compute-sanitizer --tool memcheck over each GPU test (EMC_TEST_QUICK=1: fewer batches;
#      MEMCHECK_TIMEOUT seconds each, default 900)
# Logs go to ${OUT:-$BUILD}/; a summary table is printed LAST.
#
# Exit: 0 all passed; 1 something failed; 2 prerequisites missing.
# Environment: CUDA_ARCH (90), JOBS (nproc), GPU_BUILD_DIR (build-gpu), BENCH_ARGS (extra
# emc-bench-gpu arguments, e.g. "--scale 0.25"), GPU_CHECK_NO_DEVICE_OK=1 (only for testing this
# script on a machine without a GPU: skips the prerequisite checks).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
BUILD="${GPU_BUILD_DIR:-build-gpu}"
CUDA_ARCH="${CUDA_ARCH:-90}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
read -r -a EXTRA_BENCH <<<"${BENCH_ARGS:-}"
MODE=all
PKG=""
case "${1:-}" in
  --package) MODE=package; PKG="${2:?--package needs a directory}" ;;
  --prebuilt) MODE=prebuilt; PKG="${2:?--prebuilt needs a directory}" ;;
  "") ;;
  *) echo "usage: $0 [--package DIR | --prebuilt DIR]" >&2; exit 2 ;;
esac

die2() { printf 'gpu-check: %s\n' "$*" >&2; exit 2; }
say() { printf '\n==================== gpu-check: %s ====================\n' "$*"; }

for d in /usr/local/cuda/bin "${CUDA_HOME:-/nonexistent}/bin" /opt/cuda/bin; do
  [[ -d "$d" ]] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH

# ------------------------------------------------------------------ build
build() {
  say "configure + build $BUILD/ (Release, sm_$CUDA_ARCH)"
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
        -DEMC_WITH_CUDA=ON -DEMC_BUILD_FUZZ=OFF >"$BUILD/configure.log" 2>&1 \
    || { tail -n 30 "$BUILD/configure.log" >&2; die2 "configure failed"; }
  grep -q 'embcache: CUDA ON' "$BUILD/configure.log" || die2 "configure did not enable CUDA (nvcc missing?)"
  cmake --build "$BUILD" -j "$JOBS" >"$BUILD/build.log" 2>&1 \
    || { tail -n 40 "$BUILD/build.log" >&2; die2 "build failed"; }
}

if [[ $MODE == package ]]; then
  build
  rm -rf "$PKG"
  mkdir -p "$PKG/bin" "$PKG/lib"
  cp "$BUILD"/tests/test_gpu_* "$BUILD/bench/emc-bench" "$BUILD/bench/emc-bench-gpu" "$PKG/bin/"
  # the non-system shared libraries the executables load
  for exe in "$PKG"/bin/*; do
    ldd "$exe" | awk '/=> \//{print $3}' | grep -E 'jemalloc|subunit|xxhash|check' || true
  done | sort -u | while read -r lib; do cp -L "$lib" "$PKG/lib/"; done
  echo "gpu-check: packaged $(ls "$PKG/bin" | wc -l) executables and $(ls "$PKG/lib" | wc -l) libraries in $PKG"
  exit 0
fi

# ------------------------------------------------------------------ prerequisites
if [[ "${GPU_CHECK_NO_DEVICE_OK:-0}" != "1" ]]; then
  command -v nvidia-smi >/dev/null 2>&1 || die2 "nvidia-smi not found: no NVIDIA driver (this check needs an H100)"
  command -v compute-sanitizer >/dev/null 2>&1 || die2 "compute-sanitizer not found (CUDA toolkit)"
  gpus="$(nvidia-smi -L 2>&1)" || die2 "nvidia-smi failed: $gpus"
  grep -q '^GPU [0-9]' <<<"$gpus" || die2 "no CUDA device visible (nvidia-smi -L: ${gpus:-empty})"
  echo "$gpus"
  grep -qi 'H100' <<<"$gpus" || echo "gpu-check: note: not an H100; built for sm_${CUDA_ARCH}"
fi

if [[ $MODE == prebuilt ]]; then
  BIN="$(cd "$PKG/bin" && pwd)"
  export LD_LIBRARY_PATH="$(cd "$PKG/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  command -v nvcc >/dev/null 2>&1 || die2 "nvcc not found (install the CUDA toolkit)"
  build
  BIN="$BUILD/bin-gpu"
  mkdir -p "$BIN"
  cp "$BUILD"/tests/test_gpu_* "$BUILD/bench/emc-bench" "$BUILD/bench/emc-bench-gpu" "$BIN/"
fi
LOGDIR="${OUT:-$BUILD}"
mkdir -p "$LOGDIR"
LOGDIR="$(cd "$LOGDIR" && pwd)"
echo "gpu-check: logs in $LOGDIR"
{ nvidia-smi 2>&1 || true; nvcc --version 2>&1 || true; } >"$LOGDIR/env.log"

ROWS=()
FAILED=0
row() { ROWS+=("$1|$2|$3"); [[ "$2" == PASS || "$2" == INFO ]] || FAILED=1; }
print_table() {
  say "summary"
  printf '%-30s %-6s %s\n' "CHECK" "RESULT" "DETAIL"
  printf '%-30s %-6s %s\n' "------------------------------" "------" "------------------------------"
  local r a b c
  for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-30s %-6s %s\n' "$a" "$b" "$c"
  done
  echo "logs: $LOGDIR"
  if [[ $FAILED -eq 0 ]]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL"; fi
}
trap print_table EXIT

# ------------------------------------------------------------------ GPU tests
TESTS=("$BIN"/test_gpu_*)
[[ -e "${TESTS[0]}" ]] || { row "gpu tests" FAIL "no test_gpu_* executables in $BIN"; exit 1; }
for exe in "${TESTS[@]}"; do
  name="$(basename "$exe")"
  say "test $name"
  set +e
  ( cd "$LOGDIR" && CK_FORK=no CK_VERBOSITY=normal TMPDIR="$LOGDIR" timeout 900 "$exe" ) >"$LOGDIR/$name.log" 2>&1
  rc=$?
  set -e
  tail -n 20 "$LOGDIR/$name.log"
  summary="$(grep -E '^[0-9]+%: Checks' "$LOGDIR/$name.log" | tail -n1 || true)"
  if [[ $rc -eq 0 ]]; then row "$name" PASS "${summary:-ok}"
  elif [[ $rc -eq 77 ]]; then row "$name" FAIL "skipped (exit 77: no device seen)"
  else row "$name" FAIL "rc=$rc ${summary} ($name.log)"; fi
done

# ------------------------------------------------------------------ bench
say "emc-bench --backend cuda (host buffers, criteo-kaggle scale 0.1)"
set +e
"$BIN/emc-bench" --backend cuda --out "$LOGDIR/bench-host-buffers.jsonl" >"$LOGDIR/bench-host-buffers.log" 2>&1
rc=$?
set -e
tail -n 3 "$LOGDIR/bench-host-buffers.log"
line="$(grep -E '^emc-bench: +hit' "$LOGDIR/bench-host-buffers.log" | tail -n1 | sed 's/^emc-bench: *//' || true)"
if [[ $rc -eq 0 ]]; then row "emc-bench cuda (host bufs)" PASS "${line:-?}"
else row "emc-bench cuda (host bufs)" FAIL "rc=$rc ${line}"; fi

say "emc-bench-gpu ${EXTRA_BENCH[*]:-}"
set +e
"$BIN/emc-bench-gpu" --out "$LOGDIR/bench-gpu.jsonl" "${EXTRA_BENCH[@]}" 2>&1 | tee "$LOGDIR/bench-gpu.log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -eq 0 ]]; then row "emc-bench-gpu" PASS "figures above and in bench-gpu.jsonl"
else row "emc-bench-gpu" FAIL "rc=$rc (bench-gpu.log)"; fi

# ------------------------------------------------------------------ compute-sanitizer
for exe in "${TESTS[@]}"; do
  name="$(basename "$exe")"
  log="$LOGDIR/memcheck-$name.log"
  say "compute-sanitizer memcheck $name"
  set +e
  ( cd "$LOGDIR" && CK_FORK=no EMC_TEST_QUICK=1 TMPDIR="$LOGDIR" timeout "${MEMCHECK_TIMEOUT:-900}" compute-sanitizer \
      --tool memcheck --leak-check full --error-exitcode 99 "$exe" ) >"$log" 2>&1
  rc=$?
  set -e
  tail -n 5 "$log"
  nerr="$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || true)"
  if [[ $rc -eq 0 && "${nerr:-}" == 0 ]]; then row "memcheck $name" PASS "0 errors"
  else row "memcheck $name" FAIL "rc=$rc, ${nerr:-?} errors (memcheck-$name.log)"; fi
done

[[ $FAILED -eq 0 ]]
