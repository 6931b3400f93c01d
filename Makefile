# Thin wrapper over CMake. The two commands: `make run` and `make test`.
BUILD_DIR   ?= build
BUILD_TYPE  ?= RelWithDebInfo
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
SS          := $(BUILD_DIR)/apps/shardsync
# Local ranks may outnumber cores; as root Open MPI also needs the two ALLOW variables.
MPIRUN      ?= OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe

# A build directory is made with Ninja (make deps installs it): it compiles a target's sources
# while the libraries it links are still being built, where Make's per-target order waits. One
# that exists keeps the generator it was made with.
# (A shell test: make expands a recipe before running its first line.)
CMAKE_GEN    = $$([ -f $(1)/CMakeCache.txt ] || echo -G Ninja)

FUZZ_SECONDS ?= 10
# Sanitizer builds (the fuzzers share the ASan one): host-only code (no CUDA), separate build
# directories, at -O1 with line tables only (-g1): the sanitizers' usual level, and on the
# 2-core VM the sanitized engine.cpp compiles in 22 s instead of 71 s at RelWithDebInfo's -O2 -g
# (the builds were most of make test's time: results/test-time/). They are unity builds
# (CMake's batches of 8 sources of a target compiled as one): the headers and the inline and
# template code they share are compiled once a batch instead of once a source, which halves
# their compile time (on the 2-core VM, 590 -> 245 CPU seconds for the ASan build with clang
# instead of GCC too, 195 -> 88 for the TSan build). A name local to one source can then meet
# another source's: scripts/unity-check.py lists those that could change which entity a
# name means. Their engine tests are those labelled `sanitize` (one of each engine path:
# tests/CMakeLists.txt); SAN_LABEL=engine runs all 53.
SAN_FLAGS   := -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1" -DCMAKE_C_FLAGS_SANITIZE="-O1 -g1" \
               -DSHARDSYNC_CUDA=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DSHARDSYNC_BUILD_TESTS=ON -DCMAKE_UNITY_BUILD=ON
SAN_LABEL   ?= sanitize
UNIT_TESTS  := test_model test_layout test_tensor test_device test_plan test_kernels test_sim test_pipeline

.PHONY: all deps deps-slurm configure build python stamp run test test-main asan-configure test-asan test-tsan test-fuzz fuzz-build fuzz-long test-configs chaos test-slurm perf-check perf-calibrate clean format

all: build

# Installs missing Debian packages (idempotent); prints the list and stops where it cannot.
deps:
	@scripts/deps.sh

# The optional set for a real Slurm job on this machine (slurmctld, slurmd, slurm-client, munge).
deps-slurm:
	@scripts/deps.sh --slurm

configure: deps
	@cmake -S . -B $(BUILD_DIR) $(call CMAKE_GEN,$(BUILD_DIR)) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >$(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }
	@grep -E "^-- shardsync" $(BUILD_DIR).configure.log || true

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The library for Python (docs/library.md): build/python/shardsync with libshardsync.so beside it.
python: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target shardsync_c
	@echo "python: export PYTHONPATH=$(CURDIR)/$(BUILD_DIR)/python; then /usr/bin/python3 -c 'import shardsync'"

# Before copying the tree somewhere without its .git (a GPU host, a cluster's scratch): the
# commit a build of the copy records (cmake/GitSha.cmake reads .shardsync-commit there).
stamp:
	@sha=$$(git rev-parse --short=12 HEAD) && { git diff --quiet HEAD -- || sha="$$sha-dirty"; } && \
	  src=$$(cmake -DSRC=. -P cmake/SourceHash.cmake) && printf '%s\nsources %s\n' "$$sha" "$$src" > .shardsync-commit && \
	  echo ".shardsync-commit: $$sha (sources $$src)"

# The main job on the embedded default: the bundled tiny MoE model on 6 local ranks (2
# trainer ranks TP2/EP2 -> 2 inference replicas of DP2/EP2): record the plans, then compare
# the four engines on the same weights, every byte verified.
run: build
	$(SS) plan record --layout tiny-moe-local --out $(BUILD_DIR)/plans-tiny-moe-local.h5
	$(MPIRUN) -np 6 $(SS) bench --layout tiny-moe-local --plans $(BUILD_DIR)/plans-tiny-moe-local.h5 --syncs 5

# Everything CI runs: the full suite, then the unit tests and the mpirun engine tests of label
# sanitize (every engine row, real producer and consumer, one test of each engine path) under
# ASan+UBSan, the threaded pipeline and those engine tests under TSan, and a short run of each
# fuzzer (built in the ASan build).
test: test-main test-asan test-tsan test-fuzz

test-main: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 900 -LE gate-self

# The project's sbatch script submitted for real to a single-node Slurm started here (part of
# test-main too, where it skips with the reason when Slurm is not installed).
test-slurm: build deps-slurm
	ctest --test-dir $(BUILD_DIR) --output-on-failure -R 'cli.slurm_job' --timeout 400

# ASan+UBSan: one clang build (build-asan) for these tests and the fuzzers (make fuzz-build),
# which need clang's libFuzzer; SHARDSYNC_FUZZ=ON adds libFuzzer's coverage instrumentation to
# the fuzzers and the libraries they link, not to the engine (tests/fuzz/CMakeLists.txt).
# It was a GCC build, and the fuzzers had a clang build of their own; clang also compiles it in
# about 30% less time.
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime takes a dynamic TLS block that happens
# to start 16 bytes into a page for one with a pre-2.25 glibc header and reads a bogus range
# from it; LeakSanitizer's tracer then dies at exit ("Tracer caught signal 11", no leak
# reported), at random with the memory layout: CI lost 12 of 21 engine tests to it. Fixed
# upstream after GCC 13 / LLVM 16, so clang 14's runtime (Debian 12's) has it too. Without the
# interceptor, LSan still scans static TLS and every thread's stack; checked (with clang): a
# leak in the consumer still fails the engine tests.
ASAN_COMMON := detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0
ASAN_CONFIG := $(SAN_FLAGS) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHARDSYNC_SANITIZE=address,undefined \
               -DSHARDSYNC_FUZZ=ON

# A build-asan made with GCC (before it was clang's) is removed first: CMake would empty its cache
# for the new compiler and configure once without the flags given.
asan-configure: deps
	@if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++$$' build-asan/CMakeCache.txt; then \
	  echo "build-asan: made with another compiler, removed"; rm -rf build-asan; fi
	@cmake -S . -B build-asan $(call CMAKE_GEN,build-asan) $(ASAN_CONFIG) >build-asan.configure.log 2>&1 \
	  || { cat build-asan.configure.log; exit 1; }

test-asan: asan-configure
	cmake --build build-asan -j $(JOBS) --target $(UNIT_TESTS) shardsync
	ASAN_OPTIONS=$(ASAN_COMMON) UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan -L unit --output-on-failure -j $(JOBS) --timeout 900
	ASAN_OPTIONS=$(ASAN_COMMON):fast_unwind_on_malloc=0 OMPI_MCA_mca_base_component_disable_dlclose=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan -L $(SAN_LABEL) --output-on-failure -j $(JOBS) --timeout 900

# TSan: the threaded pipeline test, then the mpirun engine tests (label engine: every engine
# row, the real producer and consumer, their background lane and watchdog threads) over the
# MPI transport. UCX is left out of the TSan build: its memory hooks (libucm) crash under
# TSan's interceptors, so the engine tests that need UCX skip with their reason. Two lock-order
# cycles inside Open MPI's components are suppressed by their functions (tests/tsan.supp). Checked: the engine's
# watchdog flag `armed` made a plain bool (a race with the watchdog thread) fails the engine
# tests (mpi.moe_mpi_transport among them) and passes test_pipeline.
TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp"
test-tsan: deps
	@cmake -S . -B build-tsan $(call CMAKE_GEN,build-tsan) $(SAN_FLAGS) -DSHARDSYNC_SANITIZE=thread -DSHARDSYNC_UCX=OFF >build-tsan.configure.log 2>&1 \
	  || { cat build-tsan.configure.log; exit 1; }
	cmake --build build-tsan -j $(JOBS) --target test_pipeline shardsync
	$(TSAN_ENV) build-tsan/tests/test_pipeline
	$(TSAN_ENV) ctest --test-dir build-tsan -L $(SAN_LABEL) --output-on-failure -j $(JOBS) --timeout 900

# The fuzzers in the ASan build (after make test-asan, their libraries are built already); their
# corpus, findings and logs go in build-asan/ too.
fuzz-build: asan-configure
	cmake --build build-asan -j $(JOBS) --target fuzz_model_config fuzz_plan_file fuzz_plan_reader
	mkdir -p build-asan/corpus/config build-asan/corpus/plan build-asan/corpus/plan-body

test-fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh build-asan/fuzz.txt

# Longer fuzzing (not part of make test): each fuzzer FUZZ_SECONDS (default 600), summary in
# build-asan/fuzz-long.txt (scripts/fuzz.sh says what it runs and how findings are classed).
fuzz-long: fuzz-build
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-600} scripts/fuzz.sh build-asan/fuzz-long.txt

# The suite on the build configurations that leave optional parts out (not part of make test):
# UCX and CUDA off with gnuplot hidden, and UCX off; a summary each in build-configs/
# (scripts/test-configs.sh; CONFIGS="minimal no-ucx" picks them).
test-configs: deps
	scripts/test-configs.sh build-configs

# Chaos (not part of make test): CHAOS_TRIALS (default 50) kills of a random inference rank at a
# random point, across engines, with and without a replacement (scripts/chaos.py --help);
# summary in $(BUILD_DIR)/chaos/summary.txt.
chaos: build
	python3 scripts/chaos.py --ss $(SS) --trials $${CHAOS_TRIALS:-50} --out $(BUILD_DIR)/chaos

# The performance gate: this build against a build of the commit results/perf-baseline.json
# names (built once under $(BUILD_DIR)/perf-ref/), the same steps on both, interleaved, median
# over rounds (copy 8, engine 24, overhead 8), a metric under its threshold measured again for
# as many rounds and judged on all (scripts/perf-check.py --help). perf-calibrate:
# PERF_CALIBRATE_RUNS (default 4) gate runs of this build against itself set the thresholds, and
# the reference is this commit.
perf-check: build
	python3 scripts/perf-check.py --build $(BUILD_DIR) --report $(BUILD_DIR)/perf-check.json
	ctest --test-dir $(BUILD_DIR) --output-on-failure --timeout 1600 -L gate-self

perf-calibrate: build
	python3 scripts/perf-check.py --build $(BUILD_DIR) --calibrate $${PERF_CALIBRATE_RUNS:-4} --report $(BUILD_DIR)/perf-calibration.json \
	  --write-baseline results/perf-baseline.json

format:
	find apps lib kernels tests -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz build-minimal build-no-ucx build-configs build-unity-check *.configure.log
