# embcache: developer entry points.
#
#   make bench       install deps, build Release into build/, run build/bench/emc-bench
#   make test        install deps, then the whole suite:
#                      unit     build/       + ctest
#                      asan     build-asan/  (-DEMC_SANITIZE=address,undefined) + ctest
#                      tsan     build-tsan/  (-DEMC_SANITIZE=thread) + ctest
#                      fuzz     build-fuzz/  (clang, libFuzzer) each target FUZZ_SECONDS s
#                      sim      build-sim/   (clang, -DEMC_CUDASIM=ON, ASan+UBSan): the GPU
#                               suites on the CPU model of the device (cuda/sim/), serial
#                               mode with seeds SIM_SEED and SIM_SEED + 1, then in
#                               concurrent mode (SIM_SEED + 2) through scripts/gpu-check.sh
#                               --sim (its benches too); the model's own tests (label cudasim)
#                      python   python_ctypes_example/ example + binding tests, env -i
#                    (each step also has its own target: test-unit, test-asan, ...)
#   make deps        install dependencies only (scripts/install-deps.sh)
#   make build       configure + build build/ (Release)
#   make fuzz-long   each fuzz target FUZZ_LONG_SECONDS on a corpus kept across runs in
#                    build-fuzz/long/<target>/ (seeded from fuzz/corpus/); prints execs,
#                    execs/s, cov and ft per target; crashes in build-fuzz/artifacts/
#   make fuzz-merge  minimise fuzz/corpus/<target>/ + build-fuzz/long/<target>/ into
#                    fuzz/corpus/<target>/ (seed-* and crash-* files are kept as they are)
#   make gpu-check   scripts/gpu-check.sh $(GPU_CHECK_ARGS): on an NVIDIA GPU, build build-gpu/
#                    (or use build-gpu-pkg/ from --prepare), GPU suites, memcheck, benches, all
#                    within DEADLINE s (540); logs + summary.txt in OUT (./gpu-check-out); exit 0
#                    only if every step that ran passed. GPU_CHECK_ARGS=--sim: the same flow on
#                    the CPU model (build-gpu-sim/); --prepare: build the package, no GPU needed
#   make clean       remove every build directory
#
# Knobs: JOBS, SIM_SEED (from the commit), FUZZ_SECONDS (25), FUZZ_LONG_SECONDS (600), FUZZ_TARGETS, BUILD_TYPE (Release), SAN_BUILD_TYPE
# (RelWithDebInfo), CMAKE_ARGS (extra -D flags for every configure), TSAN_CTEST_ARGS
# (e.g. "-L threads"), TSAN_CC (compiler for build-tsan/), BENCH_ARGS, PYTHON,
# KEEP_GOING (1: make test runs every step, then fails if any failed), SKIP_DEPS=1.
# Everything is idempotent: configure re-runs are incremental, builds are incremental,
# the installer only installs what is missing.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

NPROC          := $(shell nproc 2>/dev/null || echo 2)
JOBS           ?= $(NPROC)
BUILD_TYPE     ?= Release
SAN_BUILD_TYPE ?= RelWithDebInfo
FUZZ_SECONDS   ?= 25
FUZZ_LONG_SECONDS ?= 600
FUZZ_TARGETS   ?= fuzz_keycodec fuzz_store_open fuzz_api_ops fuzz_store_attach
FUZZ_CC        ?= clang
CMAKE          ?= cmake
CTEST          ?= ctest
PYTHON         ?= python3
CMAKE_ARGS     ?=
TSAN_CTEST_ARGS ?=
TSAN_CC        ?= clang
BENCH_ARGS     ?=
SKIP_DEPS      ?= 0
CTEST_TIMEOUT  ?= 900

BUILD_DIR := build
ASAN_DIR  := build-asan
TSAN_DIR  := build-tsan
FUZZ_DIR  := build-fuzz
SIM_DIR   := build-sim
# SIM_SEED: from the commit, so successive commits try new schedules and a run reproduces
# from its commit alone (the seeds are printed in each step's banner); 1 outside a git clone
SIM_SEED  ?= $(shell h=$$(git rev-parse --short=7 HEAD 2>/dev/null) && echo $$(( 0x$$h % 9973 + 1 )) || echo 1)
GPU_DIR   := build-gpu

# A clear banner per step (no commas in the title: they would split $(call) arguments).
define header
printf '\n==================== %s ====================\n' "$(1)"
endef
, := ,

export ASAN_OPTIONS  ?= detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS  ?= halt_on_error=1:second_deadlock_stack=1
export CTEST_OUTPUT_ON_FAILURE := 1

.PHONY: help deps build bench test test-unit test-asan test-tsan test-fuzz test-python test-sim \
        build-asan build-tsan build-fuzz build-sim clean gpu-check fuzz-long fuzz-merge

help:
	@sed -n '2,/^$$/p' $(firstword $(MAKEFILE_LIST)) | sed 's/^# \{0,1\}//'

# ------------------------------------------------------------------ deps
deps:
	@if [[ "$(SKIP_DEPS)" == "1" ]]; then echo "deps: skipped (SKIP_DEPS=1)"; exit 0; fi
	$(call header,deps: scripts/install-deps.sh)
	PYTHON="$(PYTHON)" bash scripts/install-deps.sh

# ------------------------------------------------------------------ builds
# $(call configure_build,DIR,BUILD_TYPE,EXTRA CMAKE ARGS)
# Tests, bench and fuzz replay drivers are switched on explicitly so that a build dir
# configured earlier with them off does not silently skip them.
COMMON_CMAKE_ARGS := -DEMC_BUILD_TESTS=ON -DEMC_BUILD_BENCH=ON -DEMC_BUILD_FUZZ=ON
define configure_build
$(CMAKE) -S . -B $(1) -DCMAKE_BUILD_TYPE=$(2) $(COMMON_CMAKE_ARGS) $(3) $(CMAKE_ARGS)
$(CMAKE) --build $(1) -j $(JOBS)
endef

build: deps
	@$(call header,build: $(BUILD_DIR)/ ($(BUILD_TYPE)))
	set -x
	$(call configure_build,$(BUILD_DIR),$(BUILD_TYPE),)

build-asan: deps
	@$(call header,build: $(ASAN_DIR)/ (address+undefined))
	set -x
	$(call configure_build,$(ASAN_DIR),$(SAN_BUILD_TYPE),-DEMC_SANITIZE=address$(,)undefined)

# build-tsan/ is built with clang (TSAN_CC): gcc's TSan ignores atomic_thread_fence, which
# the seqlock protocol relies on. Switching compilers needs `rm -rf build-tsan`.
build-tsan: deps
	@$(call header,build: $(TSAN_DIR)/ (thread))
	set -x
	$(if $(TSAN_CC),export CC=$(TSAN_CC))
	$(call configure_build,$(TSAN_DIR),$(SAN_BUILD_TYPE),-DEMC_SANITIZE=thread)

# build-sim/: cuda/*.cu compiled by clang++ against the CPU model of the device (cuda/sim/),
# under ASan+UBSan (the model checks atomics, fences, collectives and forward progress; ASan
# catches kernels' plain accesses out of bounds). Only the suites run here are built.
# (scripts/gpu-check.sh --sim configures it the same way: BUILD_TYPE, CMAKE_ARGS below.)
SIM_CMAKE_ARGS := -DEMC_BUILD_TESTS=ON -DEMC_BUILD_BENCH=ON -DEMC_BUILD_FUZZ=OFF -DEMC_CUDASIM=ON
SIM_SAN_ARGS := -DEMC_SANITIZE=address$(,)undefined $(CMAKE_ARGS)
build-sim: deps
	@$(call header,build: $(SIM_DIR)/ (CPU model of the device; address+undefined))
	set -x
	export CC=clang CXX=clang++
	$(CMAKE) -S . -B $(SIM_DIR) -DCMAKE_BUILD_TYPE=$(SAN_BUILD_TYPE) $(SIM_CMAKE_ARGS) $(SIM_SAN_ARGS)
	$(CMAKE) --build $(SIM_DIR) -j $(JOBS) --target emc_gpu_suites emc-bench emc-bench-gpu

# ------------------------------------------------------------------ bench
bench: build
	@$(call header,bench: $(BUILD_DIR)/bench/emc-bench $(BENCH_ARGS))
	set -x
	./$(BUILD_DIR)/bench/emc-bench $(BENCH_ARGS)

# ------------------------------------------------------------------ tests
# Runs every step even after a failure (KEEP_GOING=1, the default) so one CI log shows
# them all, then prints a summary and fails if any step failed. KEEP_GOING=0 stops at the
# first failure.
KEEP_GOING ?= 1
TEST_STEPS := test-unit test-asan test-tsan test-sim test-fuzz test-python
test: deps
	@failed=(); summary=()
	for step in $(TEST_STEPS); do
	  start=$$SECONDS
	  if $(MAKE) SKIP_DEPS=1 "$$step"; then
	    summary+=("$$(printf '  %-12s PASS  %4ss' "$$step" "$$((SECONDS - start))")")
	  else
	    summary+=("$$(printf '  %-12s FAIL  %4ss' "$$step" "$$((SECONDS - start))")")
	    failed+=("$$step")
	    [[ "$(KEEP_GOING)" == "1" ]] || break
	  fi
	done
	$(call header,make test: summary)
	printf '%s\n' "$${summary[@]}"
	if [[ $${#failed[@]} -gt 0 ]]; then echo "make test: FAILED: $${failed[*]}" >&2; exit 1; fi
	echo "make test: all steps passed"

test-unit: build
	@$(call header,test (a): unit tests -- $(BUILD_DIR)/)
	set -x
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS) --timeout $(CTEST_TIMEOUT)

test-asan: build-asan
	@$(call header,test (b): AddressSanitizer + UBSan -- $(ASAN_DIR)/)
	set -x
	$(CTEST) --test-dir $(ASAN_DIR) --output-on-failure --no-tests=error -j $(JOBS) --timeout $(CTEST_TIMEOUT)

# ThreadSanitizer cannot map its shadow on kernels with vm.mmap_rnd_bits > 28 (clang 14 /
# gcc 12 runtimes: "FATAL: ThreadSanitizer: unexpected memory mapping"). Probe with a tiny
# TSan program built by the same compiler; if it fails, and runs under `setarch -R` (ASLR
# off for that process tree), run ctest under setarch -R; otherwise fail with the probe's
# output.
test-tsan: build-tsan
	@$(call header,test (c): ThreadSanitizer -- $(TSAN_DIR)/)
	cc_bin="$$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' $(TSAN_DIR)/CMakeCache.txt)"
	probe_dir="$(TSAN_DIR)/tsan-probe"; mkdir -p "$$probe_dir"
	printf '%s\n' '#include <pthread.h>' 'static int x;' \
	  'static void *f(void *a) { (void)a; __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST); return 0; }' \
	  'int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0); return x != 1; }' \
	  > "$$probe_dir/probe.c"
	"$${cc_bin:-cc}" -fsanitize=thread -g "$$probe_dir/probe.c" -o "$$probe_dir/probe" -pthread
	wrap=()
	if "$$probe_dir/probe" >"$$probe_dir/probe.log" 2>&1; then
	  echo "tsan probe: ok without workaround"
	elif setarch "$$(uname -m)" -R "$$probe_dir/probe" >/dev/null 2>&1; then
	  echo "tsan probe: failed with ASLR on (vm.mmap_rnd_bits=$$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?')); running ctest under 'setarch -R'"
	  wrap=(setarch "$$(uname -m)" -R)
	else
	  cat "$$probe_dir/probe.log" >&2
	  echo "tsan probe: a trivial TSan program fails here, even under setarch -R" >&2; exit 1
	fi
	set -x
	"$${wrap[@]}" $(CTEST) --test-dir $(TSAN_DIR) --output-on-failure --no-tests=error -j $(JOBS) --timeout $(CTEST_TIMEOUT) $(TSAN_CTEST_ARGS)

# The GPU suites on the model: every schedule decision comes from EMC_CUDASIM_SEED, so a
# failure names its seed and mode, and reproduces with them (cuda/sim/README.md).
# detect_stack_use_after_return=0 for this step only: every kernel thread of the model is a
# fiber, and ASan's fake stack frames for them made test_gpu_cache more than 2.5x slower
# (79 s with it off; stopped after 210 s with it on), a cost the 25-minute `make test` cannot carry.
test-sim: export ASAN_OPTIONS := $(subst detect_stack_use_after_return=1,detect_stack_use_after_return=0,$(ASAN_OPTIONS))
test-sim: build-sim
	@$(call header,test (sim): the GPU suites on the CPU model of the device -- $(SIM_DIR)/)
	set -x
	$(CTEST) --test-dir $(SIM_DIR) --output-on-failure --no-tests=error -j $(JOBS) --timeout $(CTEST_TIMEOUT) -L cudasim
	for seed in $(SIM_SEED) $$(( $(SIM_SEED) + 1 )); do
	  $(call header,GPU suites on the model: EMC_CUDASIM_MODE=serial EMC_CUDASIM_SEED=$$seed)
	  EMC_CUDASIM_MODE=serial EMC_CUDASIM_SEED=$$seed \
	    $(CTEST) --test-dir $(SIM_DIR) --output-on-failure --no-tests=error -j $(JOBS) --timeout $(CTEST_TIMEOUT) -L gpu
	done
	$(call header,scripts/gpu-check.sh --sim: EMC_CUDASIM_MODE=concurrent EMC_CUDASIM_SEED=$$(( $(SIM_SEED) + 2 )))
	EMC_CUDASIM_MODE=concurrent EMC_CUDASIM_SEED=$$(( $(SIM_SEED) + 2 )) OUT=$(SIM_DIR)/gpu-check \
	  BUILD_DIR=$(SIM_DIR) BUILD_TYPE=$(SAN_BUILD_TYPE) CMAKE_ARGS="$(SIM_SAN_ARGS)" DEADLINE=1500 JOBS=$(JOBS) \
	  bash scripts/gpu-check.sh --sim

# libFuzzer: fuzz/CMakeLists.txt builds FUZZ_TARGETS with -fsanitize=fuzzer,address,undefined
# when EMC_FUZZ_ENGINE=libfuzzer. Each target runs FUZZ_SECONDS over a scratch copy of
# fuzz/corpus/<name>/ (the checked-in corpus is never modified); crashes land in
# build-fuzz/artifacts/<name>/ and fail the step. CUDA is off there: no fuzzer reaches a
# device, and a CUDA-language link would go through g++, which lacks -fsanitize=fuzzer.
build-fuzz: deps
	@$(call header,build: $(FUZZ_DIR)/ (CC=$(FUZZ_CC) libFuzzer))
	set -x
	CC=$(FUZZ_CC) $(CMAKE) -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=$(SAN_BUILD_TYPE) \
	  -DEMC_FUZZ_ENGINE=libfuzzer -DEMC_BUILD_FUZZ=ON -DEMC_BUILD_TESTS=ON -DEMC_WITH_CUDA=OFF \
	  $(CMAKE_ARGS)
	$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS) --target $(FUZZ_TARGETS)

test-fuzz: build-fuzz
	@$(call header,test (d): libFuzzer $(FUZZ_SECONDS)s per target)
	for t in $(FUZZ_TARGETS); do
	  $(call header,fuzz: $$t)
	  bin="$$(find $(FUZZ_DIR) -type f -name "$$t" -perm -u+x -print -quit)"
	  [[ -n "$$bin" ]] || { echo "fuzz: no executable $$t under $(FUZZ_DIR)/" >&2; exit 1; }
	  corpus="$(FUZZ_DIR)/corpus/$$t"; artifacts="$(FUZZ_DIR)/artifacts/$$t"
	  rm -rf "$$corpus"; mkdir -p "$$corpus" "$$artifacts"
	  if [[ -d "fuzz/corpus/$$t" ]]; then cp -R "fuzz/corpus/$$t/." "$$corpus/"; \
	  else echo "fuzz: note: no fuzz/corpus/$$t/, starting from an empty corpus"; fi
	  dict=()
	  for d in "fuzz/$$t.dict" "fuzz/dict/$$t.dict" "fuzz/corpus/$$t.dict"; do
	    if [[ -f "$$d" ]]; then dict=("-dict=$$d"); break; fi
	  done
	  echo "fuzz: $$bin, corpus $$(find "$$corpus" -type f | wc -l) files$${dict:+, $${dict[*]}}"
	  if ! "$$bin" -max_total_time=$(FUZZ_SECONDS) -timeout=25 -rss_limit_mb=2048 \
	        -print_final_stats=1 -artifact_prefix="$$artifacts/" "$${dict[@]}" "$$corpus" \
	        > "$(FUZZ_DIR)/$$t.log" 2>&1; then
	    tail -n 60 "$(FUZZ_DIR)/$$t.log" >&2
	    echo "fuzz: $$t FAILED; artifacts: $$(ls "$$artifacts" | tr '\n' ' ')" >&2; exit 1
	  fi
	  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$(FUZZ_DIR)/$$t.log" || true
	  echo "fuzz: $$t ok ($(FUZZ_DIR)/$$t.log)"
	done

# Long runs (not part of make test): the working corpus build-fuzz/long/<name>/ persists, so
# repeated runs go deeper; `make fuzz-merge` then minimises it into fuzz/corpus/<name>/.
fuzz-long: build-fuzz
	@$(call header,fuzz-long: $(FUZZ_LONG_SECONDS)s per target)
	printf '%-18s %12s %8s %6s %7s %s\n' target execs exec/s cov ft corpus > "$(FUZZ_DIR)/long-summary.txt"
	for t in $(FUZZ_TARGETS); do
	  $(call header,fuzz-long: $$t)
	  bin="$$(find $(FUZZ_DIR) -type f -name "$$t" -perm -u+x -print -quit)"
	  [[ -n "$$bin" ]] || { echo "fuzz-long: no executable $$t under $(FUZZ_DIR)/" >&2; exit 1; }
	  work="$(FUZZ_DIR)/long/$$t"; artifacts="$(FUZZ_DIR)/artifacts/$$t"; log="$(FUZZ_DIR)/long/$$t.log"
	  mkdir -p "$$work" "$$artifacts"
	  if [[ -d "fuzz/corpus/$$t" ]]; then cp -R "fuzz/corpus/$$t/." "$$work/"; fi
	  dict=()
	  for d in "fuzz/$$t.dict" "fuzz/dict/$$t.dict" "fuzz/corpus/$$t.dict"; do
	    if [[ -f "$$d" ]]; then dict=("-dict=$$d"); break; fi
	  done
	  echo "fuzz-long: $$bin, $$(find "$$work" -type f | wc -l) inputs in $$work, log $$log"
	  if ! "$$bin" -max_total_time=$(FUZZ_LONG_SECONDS) -timeout=25 -rss_limit_mb=2048 \
	        -print_final_stats=1 -artifact_prefix="$$artifacts/" "$${dict[@]}" "$$work" > "$$log" 2>&1; then
	    tail -n 60 "$$log" >&2
	    echo "fuzz-long: $$t FAILED; artifacts: $$(ls "$$artifacts" | tr '\n' ' ')" >&2; exit 1
	  fi
	  last="$$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$$log" | tail -n 1)"
	  printf '%-18s %12s %8s %6s %7s %s\n' "$$t" \
	    "$$(sed -n 's/^stat::number_of_executed_units: *//p' "$$log")" \
	    "$$(sed -n 's/^stat::average_exec_per_sec: *//p' "$$log")" \
	    "$$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' <<< "$$last")" \
	    "$$(sed -n 's/.* ft: \([0-9]*\) .*/\1/p' <<< "$$last")" \
	    "$$(find "$$work" -type f | wc -l) inputs" >> "$(FUZZ_DIR)/long-summary.txt"
	done
	$(call header,fuzz-long: summary ($(FUZZ_LONG_SECONDS)s per target))
	cat "$(FUZZ_DIR)/long-summary.txt"

# Minimise the checked-in corpus together with the long-run corpus into a fresh directory
# (libFuzzer -merge=1), then replace the non-seed, non-crash files of fuzz/corpus/<name>/ with
# the result (files identical to a kept seed are dropped). Review `git status fuzz/corpus`.
fuzz-merge: build-fuzz
	@$(call header,fuzz-merge: $(FUZZ_TARGETS))
	for t in $(FUZZ_TARGETS); do
	  bin="$$(find $(FUZZ_DIR) -type f -name "$$t" -perm -u+x -print -quit)"
	  [[ -n "$$bin" ]] || { echo "fuzz-merge: no executable $$t under $(FUZZ_DIR)/" >&2; exit 1; }
	  out="$(FUZZ_DIR)/merge/$$t"; keep="fuzz/corpus/$$t"
	  rm -rf "$$out"; mkdir -p "$$out" "$$keep" "$(FUZZ_DIR)/long/$$t"
	  "$$bin" -merge=1 -timeout=25 -rss_limit_mb=2048 "$$out" "$$keep" "$(FUZZ_DIR)/long/$$t" \
	    > "$(FUZZ_DIR)/merge/$$t.log" 2>&1 || { tail -n 30 "$(FUZZ_DIR)/merge/$$t.log" >&2; exit 1; }
	  find "$$keep" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'crash-*' -delete
	  kept="$$(for f in "$$keep"/*; do if [[ -f "$$f" ]]; then sha1sum < "$$f"; fi; done)"
	  n=0
	  for f in "$$out"/*; do
	    [[ -f "$$f" ]] || continue
	    h="$$(sha1sum < "$$f")"
	    grep -qF "$$h" <<< "$$kept" && continue
	    cp "$$f" "$$keep/cov-$${h:0:16}"; n=$$((n + 1))
	  done
	  echo "fuzz-merge: $$t: $$(find "$$keep" -type f | wc -l) files ($$n from the merge), $$(du -sh "$$keep" | cut -f1)"
	done

# Python in a fresh environment (env -i: no LD_PRELOAD, no GLIBC_TUNABLES, nothing
# inherited), as a new user's shell would be: the example, then the binding's tests (also
# run by test-unit's ctest as python_binding). $(PYTHON) may be a pyenv shim, which needs its
# environment: run the interpreter behind it.
test-python: build
	@$(call header,test (e): Python example and binding -- fresh environment)
	py="$$($(PYTHON) -c 'import sys; print(sys.executable)')"
	set -x
	env -i PATH=/usr/bin:/bin "$$py" python_ctypes_example/example.py
	env -i PATH=/usr/bin:/bin "$$py" tests/test_python.py $(BUILD_DIR)/libembcache.so

# ------------------------------------------------------------------ gpu
gpu-check: deps
	@$(call header,gpu-check: scripts/gpu-check.sh)
	set -x
	bash scripts/gpu-check.sh $(GPU_CHECK_ARGS)

# ------------------------------------------------------------------ clean
clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR) $(SIM_DIR) $(GPU_DIR)
