# qrepack: the two commands users and CI run. See README.md.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
TEST_DIR := build/test
RELEASE_DIR := build/release
PACKAGE_DIR := build/package

.PHONY: all deps build test demo bench fuzz format clean package
FUZZ_SECONDS ?= 60

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(RELEASE_DIR) -DCMAKE_BUILD_TYPE=Release -DQREPACK_BUILD_TESTS=OFF >/dev/null
	@cmake --build $(RELEASE_DIR) -j $(JOBS)

test: deps
	@cmake -S . -B $(TEST_DIR) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" \
	  -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DQREPACK_WERROR=ON -DQREPACK_SANITIZE=ON \
	  -DQREPACK_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(TEST_DIR) -j $(JOBS)
	@bash scripts/fuzz.sh build >/dev/null
	@bash scripts/package.sh $(PACKAGE_DIR) >/dev/null
	@cd $(TEST_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(RELEASE_DIR)/qrepack

# The Debian packages qrepack and libqrepack-dev in build/package (CPack; README "Install").
package: deps
	@bash scripts/package.sh $(PACKAGE_DIR)

bench: build
	@bash scripts/bench.sh $(RELEASE_DIR)

# Every libFuzzer target for FUZZ_SECONDS each (default 60); findings land in build/fuzz/findings.
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh all

format:
	@find include src tests bench fuzz \( -name '*.h' -o -name '*.cc' \) | xargs clang-format -i

clean:
	rm -rf build
