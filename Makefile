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
	@JOBS=$(JOBS) bash scripts/build-release.sh $(RELEASE_DIR)

# Installs, builds (clang sanitized + fuzz, g++ release + packages) and runs ctest; prints the
# phase times and the ten slowest tests at the end (scripts/test.sh, docs/development.md).
test:
	@JOBS=$(JOBS) bash scripts/test.sh

demo: build
	@bash scripts/demo.sh $(RELEASE_DIR)/qrepack

# The Debian packages qrepack and libqrepack-dev in build/package (CPack; README "Install").
package: deps
	@JOBS=$(JOBS) bash scripts/package.sh $(PACKAGE_DIR) $(RELEASE_DIR)

bench: build
	@bash scripts/bench.sh $(RELEASE_DIR)

# Every libFuzzer target for FUZZ_SECONDS each (default 60); findings land in build/fuzz/findings.
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh all

format:
	@find include src tests bench fuzz \( -name '*.h' -o -name '*.cc' \) | xargs clang-format -i

clean:
	rm -rf build
