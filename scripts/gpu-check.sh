#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA H100 (sm_90):
#   1. configure + build build-gpu/ (Release, CMAKE_CUDA_ARCHITECTURES=90)
#   2. ctest -L gpu --output-on-failure
#   3. compute-sanitizer --tool memcheck over every gpu test executable
#   4. build-gpu/bench/emc-bench --backend cuda, then --backend cuda --all-hit
# Logs go to ${OUT:-build-gpu}/ (*.log, bench-*.jsonl); a summary table is printed LAST.
#
# Exit: 0 all passed; 1 something failed (see the table and logs); 2 prerequisites missing
# (nvidia-smi, compute-sanitizer, nvcc or a visible device).
#
# Environment: CUDA_ARCH (90), JOBS (nproc), GPU_BUILD_DIR (build-gpu), BENCH_ARGS (extra
# emc-bench arguments), GPU_CHECK_NO_DEVICE_OK=1 (only for testing this script on a machine
# without a GPU: skips the prerequisite checks).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
BUILD="${GPU_BUILD_DIR:-build-gpu}"
CUDA_ARCH="${CUDA_ARCH:-90}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
LOGDIR="${OUT:-$BUILD}"
read -r -a EXTRA_BENCH <<<"${BENCH_ARGS:-}"

die2() { printf 'gpu-check: %s\n' "$*" >&2; exit 2; }
say() { printf '\n==================== gpu-check: %s ====================\n' "$*"; }

# ------------------------------------------------------------------ prerequisites
for d in /usr/local/cuda/bin "${CUDA_HOME:-/nonexistent}/bin" /opt/cuda/bin; do
  [[ -d "$d" ]] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH

if [[ "${GPU_CHECK_NO_DEVICE_OK:-0}" != "1" ]]; then
  command -v nvidia-smi >/dev/null 2>&1 \
    || die2 "nvidia-smi not found: no NVIDIA driver on this machine (this check needs an H100)"
  command -v compute-sanitizer >/dev/null 2>&1 \
    || die2 "compute-sanitizer not found (install the CUDA toolkit; looked in PATH and /usr/local/cuda/bin)"
  command -v nvcc >/dev/null 2>&1 || die2 "nvcc not found (install the CUDA toolkit)"
  gpus="$(nvidia-smi -L 2>&1)" || die2 "nvidia-smi failed: $gpus"
  grep -q '^GPU [0-9]' <<<"$gpus" || die2 "no CUDA device visible (nvidia-smi -L: ${gpus:-empty})"
  echo "$gpus"
  grep -qi 'H100' <<<"$gpus" || echo "gpu-check: note: not an H100; building for sm_${CUDA_ARCH} anyway"
fi

mkdir -p "$LOGDIR"
LOGDIR="$(cd "$LOGDIR" && pwd)"
echo "gpu-check: logs in $LOGDIR"
{ nvidia-smi 2>&1 || true; nvcc --version 2>&1 || true; } >"$LOGDIR/env.log"

# Results for the final table: rows of "item|result|detail".
ROWS=()
FAILED=0
row() { ROWS+=("$1|$2|$3"); [[ "$2" == PASS || "$2" == INFO ]] || FAILED=1; }

print_table() {
  say "summary"
  printf '%-34s %-6s %s\n' "CHECK" "RESULT" "DETAIL"
  printf '%-34s %-6s %s\n' "----------------------------------" "------" "------------------------------"
  local r a b c
  for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-34s %-6s %s\n' "$a" "$b" "$c"
  done
  echo "logs: $LOGDIR"
  if [[ $FAILED -eq 0 ]]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL"; fi
}
trap print_table EXIT

# ------------------------------------------------------------------ build
say "configure + build $BUILD/ (Release, sm_$CUDA_ARCH)"
if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
      -DEMC_WITH_CUDA=ON >"$LOGDIR/configure.log" 2>&1 \
   && cmake --build "$BUILD" -j "$JOBS" >"$LOGDIR/build.log" 2>&1; then
  cuda_on="$(grep -o 'embcache: CUDA [A-Z]*' "$LOGDIR/configure.log" | head -n1 || true)"
  row "build ($BUILD)" PASS "${cuda_on:-configured}"
  if [[ "$cuda_on" != *"CUDA ON"* ]]; then
    row "CUDA enabled in build" FAIL "configure did not enable CUDA (see configure.log)"
  fi
else
  tail -n 40 "$LOGDIR/configure.log" "$LOGDIR/build.log" 2>/dev/null >&2 || true
  row "build ($BUILD)" FAIL "see configure.log / build.log"
  exit 1
fi

# ------------------------------------------------------------------ ctest -L gpu
say "ctest -L gpu"
set +e
ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 900 2>&1 | tee "$LOGDIR/ctest-gpu.log"
ctest_rc=${PIPESTATUS[0]}
set -e
summary="$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$LOGDIR/ctest-gpu.log" | tail -n1 || true)"
skipped="$(grep -cE '\*\*\*Skipped|Not Run' "$LOGDIR/ctest-gpu.log" || true)"
if grep -q 'No tests were found' "$LOGDIR/ctest-gpu.log"; then
  row "ctest -L gpu" FAIL "no tests labelled gpu"
elif [[ $ctest_rc -eq 0 && "${skipped:-0}" -eq 0 ]]; then
  row "ctest -L gpu" PASS "$summary"
elif [[ $ctest_rc -eq 0 ]]; then
  row "ctest -L gpu" FAIL "$summary; $skipped skipped (exit 77: no device seen?)"
else
  row "ctest -L gpu" FAIL "rc=$ctest_rc; $summary"
fi

# ------------------------------------------------------------------ compute-sanitizer
say "compute-sanitizer --tool memcheck"
# Test commands of the gpu-labelled tests, one JSON array per line, from ctest's JSON.
mapfile -t gpu_cmds < <(ctest --test-dir "$BUILD" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
for t in json.load(sys.stdin).get("tests", []):
    if t.get("command"):
        print(json.dumps({"name": t["name"], "command": t["command"]}))
' || true)
if [[ ${#gpu_cmds[@]} -eq 0 && -d "$BUILD/tests" ]]; then
  while IFS= read -r exe; do
    gpu_cmds+=("$(python3 -c 'import json,sys,os; print(json.dumps({"name": os.path.basename(sys.argv[1]), "command": [sys.argv[1]]}))' "$exe")")
  done < <(find "$BUILD/tests" -type f -perm -u+x -name 'test_gpu*' | sort)
fi
if [[ ${#gpu_cmds[@]} -eq 0 ]]; then
  row "memcheck" FAIL "no gpu test executables found"
fi
for j in "${gpu_cmds[@]}"; do
  name="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$j")"
  mapfile -t cmd < <(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["command"]))' "$j")
  log="$LOGDIR/memcheck-$name.log"
  echo "memcheck: $name: ${cmd[*]}"
  set +e
  # CK_FORK=no: keep Check's tests in the sanitized process.
  CK_FORK=no compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 \
    --log-file "$log.tool" "${cmd[@]}" >"$log" 2>&1
  rc=$?
  set -e
  cat "$log.tool" >>"$log" 2>/dev/null || true
  nerr="$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || true)"
  if [[ $rc -eq 0 && "${nerr:-}" == 0 ]]; then
    row "memcheck $name" PASS "0 errors"
  elif [[ $rc -eq 77 ]]; then
    row "memcheck $name" FAIL "test skipped (exit 77)"
  else
    row "memcheck $name" FAIL "rc=$rc, ${nerr:-?} errors (memcheck-$name.log)"
  fi
done

# ------------------------------------------------------------------ bench
# emc-bench prints one JSON line per configuration on stdout (and appends it to --out);
# progress and a human summary go to stderr.
bench_summary() {  # bench_summary JSONL -> "lookups/s X, hit ratio Y, backend Z"
  python3 - "$1" <<'PY' 2>/dev/null || true
import json, sys
rec = None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        try:
            rec = json.loads(line)
        except ValueError:
            pass
if rec:
    lps, hit = rec.get("lookups_per_s"), rec.get("hit_ratio")
    lps = f"{lps:.3g}" if isinstance(lps, (int, float)) else "?"
    hit = f"{hit:.4f}" if isinstance(hit, (int, float)) else "?"
    print(f"lookups/s {lps}, hit ratio {hit}, backend {rec.get('backend', '?')}")
PY
}
run_bench() {  # run_bench LABEL ARGS...
  local label="$1"; shift
  local exe="$BUILD/bench/emc-bench" log="$LOGDIR/bench-$label.log"
  local jsonl="$LOGDIR/bench-$label.jsonl" rc detail
  say "bench: emc-bench $*"
  if [[ ! -x "$exe" ]]; then row "bench $label" FAIL "$exe missing"; return; fi
  rm -f "$jsonl"
  set +e
  "$exe" "$@" "${EXTRA_BENCH[@]}" --out "$jsonl" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  detail="$(bench_summary "$jsonl")"
  if [[ $rc -ne 0 ]]; then
    row "bench $label" FAIL "rc=$rc${detail:+; $detail} (bench-$label.log)"
  elif [[ -z "$detail" ]]; then
    row "bench $label" FAIL "no JSON result line (bench-$label.log)"
  elif [[ "$detail" != *"backend cuda"* ]]; then
    row "bench $label" FAIL "$detail (expected backend cuda)"
  else
    row "bench $label" PASS "$detail"
  fi
}
run_bench cuda --backend cuda
run_bench cuda-all-hit --backend cuda --all-hit

[[ $FAILED -eq 0 ]]
