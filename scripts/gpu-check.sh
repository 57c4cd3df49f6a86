#!/usr/bin/env bash
# gpu-check: embcache's CUDA backend on one GPU (an H100, sm_90), inside ONE 10-minute call.
#
# Usage:
#   OUT=$OUT bash scripts/gpu-check.sh   on the GPU machine: build (or reuse) build-gpu/, then run
#   bash scripts/gpu-check.sh --sim      the same flow on the CPU model of the device (cuda/sim/),
#                                        no GPU: build-gpu-sim/ (clang, -DEMC_CUDASIM=ON); no
#                                        nvidia-smi, no compute-sanitizer, no GPU-only benches
#   bash scripts/gpu-check.sh --prepare  here, no GPU needed: build build-gpu/ with nvcc, then put
#                                        the GPU executables, their CTest files and the shared
#                                        libraries they load (jemalloc, xxhash, subunit) in
#                                        build-gpu-pkg/ (~17 MB): carry it to a device that lacks
#                                        the build dependencies (run's carry: ["build-gpu-pkg"])
# Steps, in priority order; each gets PCT % of the time left before DEADLINE (timeout per step):
#   env        nvidia-smi, GPU name, driver and toolkit versions (--sim: compilers)         10 %
#   build      cmake BUILD_TYPE (Release), tests and benches on, the GPU suites and benches  70 %
#              only (target emc_gpu_suites, emc-bench, emc-bench-gpu); incremental when
#              configured already. Where build-gpu-pkg/ is (and PREBUILT is not 0) it is used
#              instead, unless built from other sources (FAIL: stale); no build then
#   gpu-first  ctest: test_gpu_train, test_gpu_cache (--sim: every gpu suite, JOBS at once)  60 %
#   bench-train emc-bench-gpu --train --scale BENCH_SCALE (--sim: 3 steps of 256 x 26 ids)   34 %
#   bench-gpu  emc-bench-gpu --scale BENCH_SCALE (not --sim: sized for a GPU)               40 %
#   gpu-tests  ctest: every other gpu suite (not --sim: they ran in gpu-first)              70 %
#   memcheck   compute-sanitizer --tool memcheck on MEMCHECK_SUITE (not --sim)              50 %
#   bench-cuda emc-bench --backend cuda (host buffers) at BENCH_SCALE                       100 %
# On the model (--sim) every timing is the model's, never a GPU figure (the benches name the
# device: "embcache CPU model of an NVIDIA H100").
# Tests run with EMC_TEST_QUICK=1 (small variants) and CUDA_MODULE_LOADING=EAGER (lazy loading
# can deadlock spinning kernels). A step with under MIN_SLICE s left is SKIP; one that outlives its
# slice is TIMEOUT. Binaries are absolute paths.
# Output, flat, 6 files (the device tool brings back 8): $OUT/summary.txt and $OUT/<step>.log
# (the bench runs share bench.log). summary.txt has the commit and one row per step (name,
# status PASS/FAIL/SKIP/TIMEOUT, seconds, rc, log) with its exact command under it, each row
# written when its step ends (a kill keeps them); it is printed again at the end.
# Exit: 0 every step that ran passed; 1 a step failed or timed out (or the script was signalled);
# 2 bad usage.
# Environment: OUT (./gpu-check-out), DEADLINE (540 s), MIN_SLICE (10), CUDA_ARCH (90), JOBS
# (nproc), BUILD_DIR (build-gpu / build-gpu-sim), BUILD_TYPE (Release), CMAKE_ARGS (extra
# configure flags; `make test` passes its build-sim/ configuration), BENCH_SCALE
# (0.05; --sim 0.002), MEMCHECK_SUITE (test_gpu_cache), PREBUILT (1; 0: ignore build-gpu-pkg/).
set -uo pipefail

START=$(date +%s)
MODE=gpu
usage() { sed -n '3,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  --sim) MODE=sim ;;
  --prepare) MODE=prepare ;;
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac
[[ $# -le 1 ]] || { usage >&2; exit 2; }
DEADLINE="${DEADLINE:-540}"
MIN_SLICE="${MIN_SLICE:-10}"
[[ "$DEADLINE$MIN_SLICE" =~ ^[0-9]+$ ]] || { echo "gpu-check: DEADLINE and MIN_SLICE are seconds" >&2; exit 2; }

mkdir -p "${OUT:-./gpu-check-out}" || exit 2
OUT_DIR="$(cd "${OUT:-./gpu-check-out}" && pwd)"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
if [[ $MODE == sim ]]; then B="${BUILD_DIR:-build-gpu-sim}"; else B="${BUILD_DIR:-build-gpu}"; fi
mkdir -p "$B" && B="$(cd "$B" && pwd)"
PKG="$ROOT/build-gpu-pkg" # --prepare's package: GPU executables, their CTest files, deps-lib/
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
CUDA_ARCH="${CUDA_ARCH:-90}"
if [[ $MODE == sim ]]; then SCALE="${BENCH_SCALE:-0.002}"; else SCALE="${BENCH_SCALE:-0.05}"; fi
SUITE="${MEMCHECK_SUITE:-test_gpu_cache}"
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer "${CUDA_HOME:-/nonexistent}/bin"; do
  [[ -d "$d" && ":$PATH:" != *":$d:"* ]] && PATH="$PATH:$d"
done
export PATH CUDA_MODULE_LOADING=EAGER EMC_TEST_QUICK=1 CTEST_OUTPUT_ON_FAILURE=1
rm -f "$OUT_DIR"/summary.txt "$OUT_DIR"/{env,build,gpu-tests,memcheck,bench}.log

COMMIT="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ $COMMIT != unknown ]] && [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  COMMIT="$COMMIT (+ uncommitted changes)"
fi
# the build's inputs, to tell old code from new where there is no .git, and a stale package
SOURCES="$(find CMakeLists.txt cmake include lib cuda tests bench -type f \( -name '*.[ch]' -o -name '*.cu' \
  -o -name '*.cuh' -o -name '*.cpp' -o -name '*.in' -o -name '*.cmake' -o -name CMakeLists.txt \) -print0 |
  LC_ALL=C sort -z | xargs -0 cat | sha256sum | cut -c1-16)"
if [[ $MODE == gpu && -f $PKG/prebuilt.txt && ${PREBUILT:-1} != 0 ]]; then
  B="$PKG"
  read -r B0 H0 <"$PKG/prebuilt.txt"
  export LD_LIBRARY_PATH="$PKG/deps-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
SUM="$OUT_DIR/summary.txt"
{
  echo "gpu-check --$MODE  $(date -u +%Y-%m-%dT%H:%M:%SZ)  host $(hostname 2>/dev/null || echo '?')"
  echo "commit:   $COMMIT"
  echo "sources:  $SOURCES (sha256 of the C, CUDA and CMake files the build reads)"
  echo "deadline: ${DEADLINE}s  build: $B  logs: $OUT_DIR"
  echo "env:      CUDA_MODULE_LOADING=EAGER EMC_TEST_QUICK=1 CTEST_OUTPUT_ON_FAILURE=1"
  [[ $B != "$PKG" ]] || echo "env:      LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  printf '%-11s %-7s %5s %4s  %s\n' STEP STATUS SECS RC LOG
} >"$SUM"

FAILED=0 CUR="" CUR_NAME=""
# row NAME STATUS SECS RC LOG CMD [DETAIL]: one summary row, its command under it
row() {
  printf '%-11s %-7s %5s %4s  %s%s\n' "$1" "$2" "$3" "$4" "$5" "${7:+  ($7)}" | tee -a "$SUM"
  [[ $6 == - ]] || printf '            $ %s\n' "$6" >>"$SUM"
  [[ $2 == PASS || $2 == SKIP ]] || FAILED=1
}
skip() { row "$1" SKIP 0 - - "-" "$2"; }
finish() {
  local verdict=PASS
  [[ $FAILED -eq 0 ]] || verdict=FAIL
  echo "result:   $verdict ($(($(date +%s) - START))s of ${DEADLINE}s)" >>"$SUM"
  printf '\n==================== gpu-check summary (%s) ====================\n' "$SUM"
  cat "$SUM"
  exit "$FAILED"
}
# shellcheck disable=SC2317 # invoked by the traps below
on_signal() {
  trap - TERM INT
  [[ -n $CUR ]] && kill -TERM "$CUR" 2>/dev/null
  row "${CUR_NAME:-script}" FAIL "$(($(date +%s) - START))" - - "-" "gpu-check got SIG$1"
  finish
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

# step NAME PCT LOG CMD [DETAIL_REGEX]: run CMD (a bash command line) under timeout with PCT % of
# the seconds left; its output appended to $OUT_DIR/LOG; the last match of DETAIL_REGEX
# goes into the row. Sets STEP_RC.
step() {
  local name=$1 pct=$2 log="$OUT_DIR/$3" cmd=$4 re=${5:-} left slice t0 st detail="" off
  left=$((START + DEADLINE - 5 - $(date +%s)))
  STEP_RC=-1
  if ((left < MIN_SLICE)); then skip "$name" "no time left: ${left}s"; return; fi
  slice=$((left * pct / 100))
  ((slice >= MIN_SLICE)) || slice=$MIN_SLICE
  off=$(($(stat -c %s "$log" 2>/dev/null || echo 0) + 1))
  printf '\n==== %s (%ss): %s\n' "$name" "$slice" "$cmd" >>"$log"
  echo "gpu-check: $name: ${slice}s of the ${left}s left ..."
  t0=$(date +%s)
  timeout -k 5 "$slice" bash -c "$cmd" >>"$log" 2>&1 </dev/null &
  CUR=$! CUR_NAME=$name
  wait "$CUR"
  STEP_RC=$?
  CUR="" CUR_NAME=""
  t0=$(($(date +%s) - t0))
  if ((STEP_RC == 0)); then st=PASS
  elif ((STEP_RC == 124 || (STEP_RC == 137 && t0 >= slice))); then st=TIMEOUT
  else st=FAIL; fi
  [[ -n $re ]] && detail="$(tail -c "+$off" "$log" | grep -av '^==== ' | grep -aoE "$re" | tail -n 1 | cut -c1-90)"
  [[ $st == PASS ]] || { tail -c "+$off" "$log" | tail -n 8 | sed 's/^/    | /'; }
  row "$name" "$st" "$t0" "$STEP_RC" "$3" "[timeout ${slice}s] $cmd" "$detail"
}
q() { printf '%q' "$1"; }

# ------------------------------------------------------------------ env
if [[ $MODE == gpu ]]; then
  step env 10 env.log "nvidia-smi -L | grep '^GPU [0-9]' && nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader && nvidia-smi && { nvcc --version; compute-sanitizer --version; cmake --version; uname -a; } 2>&1" \
    '^[^,]+, [0-9.]+, [0-9.]+, [0-9]+ MiB$'
else
  CC_NAME=nvcc
  [[ $MODE == sim ]] && CC_NAME=clang
  step env 10 env.log "uname -a && cmake --version | head -n 1 && $CC_NAME --version && nproc"
fi

# ------------------------------------------------------------------ build
CONF="-DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DEMC_BUILD_TESTS=ON -DEMC_BUILD_BENCH=ON -DEMC_BUILD_FUZZ=OFF${CMAKE_ARGS:+ $CMAKE_ARGS}"
TARGETS="--target emc_gpu_suites emc-bench emc-bench-gpu"
BUILT="test -x $(q "$B/tests/test_gpu_cache") && test -x $(q "$B/bench/emc-bench-gpu")"
if [[ $MODE == sim ]]; then
  step build 70 build.log "CC=clang CXX=clang++ cmake -S $(q "$ROOT") -B $(q "$B") $CONF -DEMC_CUDASIM=ON && cmake --build $(q "$B") -j $JOBS $TARGETS && $BUILT"
elif [[ $B == "$PKG" ]]; then # --prepare's package, carried here: its CTest files re-pointed
  step build 70 build.log "{ test $H0 = $SOURCES || { echo 'stale: $(q "$PKG") was built from sources $H0, these are $SOURCES: run --prepare again (or PREBUILT=0)'; false; }; } && find $(q "$PKG") -name CTestTestfile.cmake -exec sed -i 's|$B0/|$PKG/|g' {} + && $BUILT && echo 'reusing the package --prepare built in $B0'" \
    'reusing the package|stale'
else
  step build 70 build.log "cmake -S $(q "$ROOT") -B $(q "$B") $CONF -DEMC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH && cmake --build $(q "$B") -j $JOBS $TARGETS && $BUILT" \
    'embcache: CUDA [A-Z]+'
fi
if [[ $MODE == prepare ]]; then
  # the GPU executables, their CTest files and the non-system shared libraries they load
  [[ $STEP_RC -eq 0 ]] && step package 100 build.log "rm -rf $(q "$PKG") && mkdir -p $(q "$PKG")/{tests,bench,deps-lib} && cd $(q "$B") && cp -v tests/test_gpu_* $(q "$PKG/tests/") && cp -v bench/emc-bench bench/emc-bench-gpu $(q "$PKG/bench/") && find . -name CTestTestfile.cmake -not -path '*/CMakeFiles/*' -exec cp -v --parents -t $(q "$PKG/") {} + && for f in tests/test_gpu_* bench/emc-bench*; do ldd \"\$f\"; done | awk '/=> \\//{print \$3}' | grep -E 'jemalloc|xxhash|subunit|libcheck' | sort -u | xargs -r cp -Lv -t $(q "$PKG/deps-lib") && echo $(q "$B") $SOURCES >$(q "$PKG/prebuilt.txt") && echo \"package: \$(du -sh $(q "$PKG") | cut -f1)\"" \
    'package: .*'
  echo "gpu-check: to run it on a device without the build dependencies: carry [\"build-gpu-pkg\"], run OUT=\$OUT bash scripts/gpu-check.sh"
  finish
fi
[[ $STEP_RC -eq 0 ]] || NOBUILD="the build step did not pass"

# ------------------------------------------------------------------ GPU tests, benches
# a suite that finds no device exits 77, which ctest counts as skipped, not failed: fail it here
# (the regex [(]Skipped[)] does not match this command line, echoed into the log)
FIRST='^test_gpu_(train|cache)$'
# on a GPU the suites run one at a time (each sized for the whole device); on the model, JOBS at once
CTEST_J=1; [[ $MODE == sim ]] && CTEST_J=$JOBS
gpu_ctest() { # NAME PCT CTEST-SELECTION
  step "$1" "$2" gpu-tests.log "cd $(q "$B") && ctest -j $CTEST_J $3 --no-tests=error && if grep -q '[(]Skipped[)]' $(q "$OUT_DIR/gpu-tests.log"); then echo 'gpu-check: a suite exited 77 (skipped: no CUDA device)'; false; fi" \
    'Start +[0-9]+: [a-z_]+|[0-9]+% tests passed.*|No tests were found|gpu-check: .*'
}
if [[ -n ${NOBUILD:-} ]]; then skip gpu-first "$NOBUILD"
elif [[ $MODE == sim ]]; then gpu_ctest gpu-first 70 "-L gpu" # all at once: JOBS keep busy
else gpu_ctest gpu-first 60 "-L gpu -R '$FIRST'"; fi
if [[ -n ${NOBUILD:-} ]]; then skip bench-train "$NOBUILD"
elif [[ $MODE == sim ]]; then
  step bench-train 34 bench.log "$(q "$B/bench/emc-bench-gpu") --train --scale $SCALE --train-steps 3 --train-warmup 1 --train-batch 256 --reps 2" \
    'step [0-9.]+ us median|graph capture failed.*'
  skip bench-gpu "--sim: its hit/miss figures are sized for a GPU (lookups of 2^20 rows)"
else
  step bench-train 34 bench.log "$(q "$B/bench/emc-bench-gpu") --train --scale $SCALE --train-steps 20 --train-warmup 5" 'step [0-9.]+ us median|graph capture failed.*'
  step bench-gpu 40 bench.log "$(q "$B/bench/emc-bench-gpu") --scale $SCALE --reps 5" 'throughput, 16384 x 26 ids +[0-9.e+]+ ids/s'
fi
if [[ -n ${NOBUILD:-} ]]; then skip gpu-tests "$NOBUILD"
elif [[ $MODE == sim ]]; then skip gpu-tests "--sim: every suite ran in gpu-first"
else gpu_ctest gpu-tests 70 "-L gpu -E '$FIRST'"; fi

# ------------------------------------------------------------------ compute-sanitizer
if [[ $MODE == sim ]]; then skip memcheck "--sim: no compute-sanitizer on the CPU model"
elif [[ -n ${NOBUILD:-} ]]; then skip memcheck "$NOBUILD"
elif ! command -v compute-sanitizer >/dev/null 2>&1; then skip memcheck "compute-sanitizer not found"
else
  step memcheck 50 memcheck.log "CK_FORK=no CK_DEFAULT_TIMEOUT=600 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 $(q "$B/tests/$SUITE")" \
    'ERROR SUMMARY: [0-9]+ errors?'
fi

# ------------------------------------------------------------------ the host-buffer bench
if [[ -n ${NOBUILD:-} ]]; then skip bench-cuda "$NOBUILD"
elif [[ $MODE == sim ]]; then
  step bench-cuda 100 bench.log "$(q "$B/bench/emc-bench") --backend cuda --scale $SCALE --batch 256 --batches 3 --warmup 1 --no-lru-check --no-per-table" \
    'emc-bench: +hit .*'
else
  step bench-cuda 100 bench.log "$(q "$B/bench/emc-bench") --backend cuda --scale $SCALE --batches 20 --warmup 5" 'emc-bench: +hit .*'
fi
finish
