#!/usr/bin/env bash
# make bench: kernel benchmarks plus whole-process runs on a generated 2 GB fixture, with peak
# RSS, so resource claims come from a command anyone can rerun.
set -euo pipefail
build=${1:?usage: bench.sh BUILD_DIR}
qrepack="$build/qrepack"
measure="$build/qrepack_measure"
work=${QREPACK_BENCH_DIR:-$(mktemp -d /tmp/qrepack-bench.XXXXXX)}
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -m), $(date -u +%F)"
echo
echo "== kernels (one thread, warm buffers)"
"$build/qrepack_bench" --benchmark_min_time=0.2 --benchmark_format=console
echo
echo "== whole process: 2 GB FP8 fixture"
"$measure" "$qrepack" fixture moe-fp8 --scale-gb 2 -o "$work/fp8-2g" | tail -n 1
du -sh "$work/fp8-2g"
echo "-- inspect (reads headers only)"
"$measure" "$qrepack" inspect "$work/fp8-2g" > /dev/null
echo "-- reshard (streams every tensor through one 16 MiB buffer, writes 2 GB, re-reads it)"
"$measure" "$qrepack" reshard "$work/fp8-2g" -o "$work/resharded" --max-shard-size 1GB
