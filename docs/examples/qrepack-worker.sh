#!/usr/bin/env bash
# One worker of a sharded conversion: converts its deterministic share of the output shards.
# The worker index comes from Slurm (SLURM_ARRAY_TASK_ID), a Kubernetes Indexed Job
# (JOB_COMPLETION_INDEX) or QREPACK_WORKER_INDEX; every worker runs the same command.
# Usage: qrepack-worker.sh SRC OUT N [convert options...]
# When all N are done: qrepack merge OUT
set -euo pipefail
src=${1:?usage: qrepack-worker.sh SRC OUT N [convert options...]}
out=${2:?usage: qrepack-worker.sh SRC OUT N [convert options...]}
n=${3:?usage: qrepack-worker.sh SRC OUT N [convert options...]}
shift 3
i=${SLURM_ARRAY_TASK_ID:-${JOB_COMPLETION_INDEX:-${QREPACK_WORKER_INDEX:-}}}
if [ -z "$i" ]; then
  echo "qrepack-worker.sh: set SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or QREPACK_WORKER_INDEX" >&2
  exit 2
fi
exec "${QREPACK:-qrepack}" convert "$src" -o "$out" --shard "$i/$n" "$@"
