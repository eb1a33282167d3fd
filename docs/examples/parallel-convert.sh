#!/usr/bin/env bash
# One machine, GNU parallel: N workers sharing the cores, then the merge.
# Usage: parallel-convert.sh SRC OUT N [convert options...]
set -euo pipefail
src=$1 out=$2 n=$3
shift 3
here=$(dirname "$0")
seq 0 $((n - 1)) | parallel --halt now,fail=1 -j "$n" \
  QREPACK_WORKER_INDEX={} "$here/qrepack-worker.sh" "$src" "$out" "$n" "$@" --threads 1
"${QREPACK:-qrepack}" merge "$out"
