#!/usr/bin/env bash
# make demo's remote-source section: a model hub on loopback (nginx, the layout and headers of
# the Hugging Face Hub; the tests' stand-in, since this machine need not reach the real one)
# serves WORK/glm-fp8, and qrepack converts from it; the result must equal WORK/glm-int4.
#
# Nothing outlives this script: the hub (tests/python/hub_fixture.py serve) keeps its tree
# inside WORK, stops nginx and removes the tree on SIGTERM, and gets SIGTERM by itself when this
# script dies; nginx dies with the hub process (setpriv --pdeathsig). The trap below ends the
# hub on every exit of this script, normal, failed or interrupted, and waits for it.
# tests/python/leftovers.py holds the script to that.
#
# usage: demo-hub.sh QREPACK WORK   (scripts/demo.sh runs it after writing WORK/glm-int4)
set -euo pipefail
qrepack=${1:?usage: demo-hub.sh QREPACK WORK}
work=${2:?usage: demo-hub.sh QREPACK WORK}
here=$(cd "$(dirname "$0")/.." && pwd)

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

if ! [ -x /usr/sbin/nginx ]; then
  echo "demo-hub: /usr/sbin/nginx is missing (scripts/install-deps.sh installs nginx-light)" >&2
  exit 3
fi
hub_pid=
stop_hub() {
  if [ -n "$hub_pid" ]; then
    kill -TERM "$hub_pid" 2>/dev/null || true
    wait "$hub_pid" 2>/dev/null || true
    hub_pid=
  fi
}
trap stop_hub EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

mkdir -p "$work/hub-tmp"
TMPDIR="$work/hub-tmp" /usr/bin/python3 "$here/tests/python/hub_fixture.py" serve --seconds 300 \
  --org zai-org --repo GLM-demo-FP8 "$work/glm-fp8" >"$work/hub.log" 2>&1 &
hub_pid=$!
for _ in $(seq 200); do
  grep -q '^HF_ENDPOINT=' "$work/hub.log" && break
  kill -0 "$hub_pid" 2>/dev/null || break
  sleep 0.1
done
HF_ENDPOINT=$(sed -n 's/^HF_ENDPOINT=//p' "$work/hub.log")
if [ -z "$HF_ENDPOINT" ]; then
  echo "demo-hub: the loopback hub did not start:" >&2
  cat "$work/hub.log" >&2
  exit 3
fi
export HF_ENDPOINT
echo
echo "A loopback model hub serves the checkpoint at HF_ENDPOINT=$HF_ENDPOINT"
step "Plan a conversion straight from the hub: headers only, nothing downloaded or written" \
  "$qrepack" convert hf://zai-org/GLM-demo-FP8 -o "$work/from-hub" --to int4-g32 --dry-run
step "Convert from the hub: shards streamed by range requests, each checked against its published SHA-256, never stored" \
  "$qrepack" convert hf://zai-org/GLM-demo-FP8 -o "$work/from-hub" --to int4-g32
step "Same bytes as the conversion from the local directory" \
  cmp "$work/from-hub/model.safetensors" "$work/glm-int4/model.safetensors"
echo "identical; qrepack.json records the commit the revision resolved to:"
grep -m1 '"commit"' "$work/from-hub/qrepack.json"
