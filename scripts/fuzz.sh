#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc, clang 14, ASan + UBSan) and runs each for
# FUZZ_SECONDS (default 60) on its seed corpus (made by fuzz/make_seeds.py from qrepack's
# fixtures and torch.save) plus the committed regression corpus (fuzz/regressions/<target>).
# A crash, leak, timeout or out-of-memory stops with exit 1 and names the input under
# build/fuzz/findings/<target>/: add it to fuzz/regressions/<target>/ once fixed.
#
# make fuzz builds its own tree (build/fuzz, -O2); make test's short pass runs the fuzz targets
# of its sanitized clang build instead (FUZZ_BUILD=build/test, set by ctest), where they link the
# same library objects as the tests.
#
# usage: scripts/fuzz.sh [build|run|all]   (default all; FUZZ_BUILD=DIR, default build/fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-build/fuzz}
make_seeds() {
  rm -rf "$build/seeds"
  /usr/bin/python3 fuzz/make_seeds.py "$build/qrepack" "$build/seeds"
}
targets=(safetensors_fuzz index_fuzz config_fuzz zip_fuzz pt_fuzz pickle_fuzz omega_pack_fuzz hub_api_fuzz gguf_fuzz)

if [ "$mode" = build ] || [ "$mode" = all ]; then
  # Line tables are what the sanitizers' reports need; precompiled headers (cmake/pch.cmake).
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DQREPACK_PCH=ON \
    -DQREPACK_FUZZ=ON -DQREPACK_BUILD_TESTS=OFF -DQREPACK_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)"
  make_seeds
fi
[ "$mode" = build ] && exit 0
[ -d "$build/seeds" ] || make_seeds

status=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings" "fuzz/regressions/$t"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  log="$build/findings/$t.log"
  if "$build/$t" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
      -max_len=1048576 -print_final_stats=1 -artifact_prefix="$findings/" \
      "$corpus" "$build/seeds/$t" "fuzz/regressions/$t" >"$log" 2>&1; then
    execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    echo "fuzz: $t: ${FUZZ_SECONDS}s, ${execs:-?} execs, coverage ${cov:-?} edges, no finding"
  else
    echo "fuzz: $t: FINDING (see $log and $findings/)" >&2
    tail -n 30 "$log" >&2
    status=1
  fi
done
exit $status
