#!/usr/bin/env bash
# make test, and so CI's .ci/run: install what is missing, build, run every test through ctest,
# then print each phase's wall time and the ten slowest tests (docs/development.md).
#
# Two builds, each compiled once:
#   build/test     clang 14, ASan + UBSan (-fno-sanitize-recover), -Werror, precompiled
#                  headers, libFuzzer coverage on the readers (-fsanitize=fuzzer-no-link; see
#                  fuzz/coverage_ignorelist.txt): the unit and CLI tests and the fuzz targets
#                  link the same objects (the fuzzer runtime only into fuzz/*).
#   build/release  g++ 12, Release, -Werror: the binary and library the Debian packages are made
#                  of (make demo, make bench and make package use the same tree).
#
# usage: scripts/test.sh   (JOBS=N for the build and ctest parallelism; default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
test_dir=build/test
release_dir=build/release
phases=()
total_start=$(date +%s.%N)

phase() {  # phase NAME COMMAND...: runs it, records its wall time
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  phases+=("$(printf '%-34s %8.1f s' "$name" "$(echo "$end - $start" | bc)")")
}

configure_test() {
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$test_dir" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-gline-tables-only" -DQREPACK_WERROR=ON \
    -DQREPACK_SANITIZE=ON -DQREPACK_FUZZ=ON -DQREPACK_PCH=ON -DQREPACK_BUILD_BENCH=OFF >/dev/null
  cmake --build "$test_dir" -j "$jobs"
}

summary() {
  local status=$? end
  end=$(date +%s.%N)
  echo
  echo "== make test: wall time per phase"
  printf '%s\n' "${phases[@]}"
  printf '%-34s %8.1f s\n' "total" "$(echo "$end - $total_start" | bc)"
  if [ -f "$test_dir/ctest.log" ]; then
    echo
    echo "== the ten slowest tests"
    sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*Passed *\([0-9.]*\) sec$/\2 \1/p;
               s/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\*\*\*[A-Za-z]* *\([0-9.]*\) sec$/\2 \1 (failed)/p' \
      "$test_dir/ctest.log" | sort -rn | awk 'NR <= 10 {printf "%8.1f s  %s %s\n", $1, $2, $3}'
  fi
  exit "$status"  # the run's own status, whatever the lines above returned
}
trap summary EXIT

phase "install (scripts/install-deps.sh)" bash scripts/install-deps.sh
phase "build: clang sanitized + fuzz" configure_test
phase "build: g++ release" bash scripts/build-release.sh "$release_dir" package
phase "package (.debs of that build)" bash scripts/package.sh build/package "$release_dir"
rm -f "$test_dir/ctest.log"
phase "ctest" bash -c "cd '$test_dir' && ctest --output-on-failure -j '$jobs' 2>&1 | tee ctest.log; exit \${PIPESTATUS[0]}"
