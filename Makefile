# Thin wrapper over CMake. The two commands: `make run` and `make test`.
BUILD_DIR   ?= build
BUILD_TYPE  ?= RelWithDebInfo
JOBS        ?= $(shell nproc)
CMAKE_FLAGS ?=
SS          := $(BUILD_DIR)/apps/shardsync
# Local ranks may outnumber cores; as root Open MPI also needs the two ALLOW variables.
MPIRUN      ?= OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe

.PHONY: all deps configure build run test sanitize clean format

all: build

# Installs missing Debian packages (idempotent); prints the list and stops where it cannot.
deps:
	@scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >$(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }
	@grep -E "^-- shardsync" $(BUILD_DIR).configure.log || true

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job on the embedded default: the bundled tiny MoE model on 6 local ranks (2
# trainer ranks TP2/EP2 -> 2 inference replicas of DP2/EP2): record the plans, then compare
# the four engines on the same weights, every byte verified.
run: build
	$(SS) plan record --layout tiny-moe-local --out $(BUILD_DIR)/plans-tiny-moe-local.h5
	$(MPIRUN) -np 6 $(SS) bench --layout tiny-moe-local --plans $(BUILD_DIR)/plans-tiny-moe-local.h5 --syncs 5

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 900

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer in a separate build.
sanitize: deps
	$(MAKE) test BUILD_DIR=build-asan CMAKE_FLAGS="-DSHARDSYNC_SANITIZE=address,undefined -DSHARDSYNC_CUDA=OFF $(CMAKE_FLAGS)"

format:
	find apps lib kernels tests -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
