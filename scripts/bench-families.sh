#!/usr/bin/env bash
# The container targets' part of make bench: the GLM-5.3-Flash container (colibri-glm53: FP8
# routed experts to int4-g64, the rest BF16 / F32) of its ~1 GB bench fixture, whole process
# at 2 threads, against its I/O floor (read the source + write an output-sized file) and
# against the GLM path (colibri-glm, FP8 -> int4-g64) on a moe-fp8 checkpoint of the same size
# and its own floor; then every other container target from its bench fixture of about 1 GB
# (colibri-qwen36, colibri-qwen3, colibri-olmoe from BF16 and from a Q4_0 / Q6_K GGUF, the
# Kimi K3 repack, Inkling) against theirs; all measured in this run, best of five each.
# Runnable alone:
#   bash scripts/bench-families.sh build/release
set -euo pipefail
build=${1:?usage: bench-families.sh BUILD_DIR [WORK OUT_ROOT]}
qrepack="$build/qrepack"
measure="$build/qrepack_measure"
work=${2:-$(mktemp -d /tmp/qrepack-bench-fam.XXXXXX)}
out_root=${3:-$work}
[ $# -ge 2 ] || trap 'rm -rf "$work"' EXIT

wall() { "$measure" "$@" 2>&1 >/dev/null | sed -n 's/.*wall \([0-9.]*\) s.*/\1/p'; }
best5() { sort -n | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

# Best-of-five wall of a conversion (argument list after the source) and of its floor.
measure_family() {  # label src convert-args...
  local label=$1 src=$2
  shift 2
  local inputs
  inputs=$(find "$src" -maxdepth 1 \( -name '*.safetensors' -o -name '*.gguf' \) | sort | tr '\n' ' ')
  cat $inputs >/dev/null
  local q read write out_bytes
  q=$(for _ in 1 2 3 4 5; do
    rm -rf "$out_root/fam"
    wall "$qrepack" convert "$src" -o "$out_root/fam" --threads 2 "$@"
  done | best5)
  out_bytes=$(du -sb "$out_root/fam" | cut -f1)
  rm -rf "$out_root/fam"
  read=$(for _ in 1 2 3 4 5; do wall sh -c "cat $inputs > /dev/null"; done | best5)
  write=$(for _ in 1 2 3 4 5; do
    rm -f "$out_root/w"
    wall dd if=/dev/zero of="$out_root/w" bs=1M count=$((out_bytes / 1048576)) status=none
  done | best5)
  rm -f "$out_root/w"
  local floor
  floor=$(awk -v r="$read" -v w="$write" 'BEGIN {printf "%.3f", r + w}')
  printf '%-52s %6.2f s  floor %5.3f s (read %s + write %s)  %sx the floor\n' "$label" "$q" \
    "$floor" "$read" "$write" "$(ratio "$q" "$floor")"
  echo "$(ratio "$q" "$floor")" >"$work/ratio-$(echo "$label" | cut -d' ' -f1)"
}

echo "== newest families: GLM-5.3-Flash container against the GLM path, same size, whole process, 2 threads, best of 5"
"$qrepack" fixture glm53-bench -o "$work/glm53" >/dev/null
"$qrepack" fixture moe-fp8 --scale-gb 1 -o "$work/glm52" >/dev/null
echo "sources: glm53-bench $(du -sb "$work/glm53" | awk '{printf "%.2f GB", $1/1e9}'), moe-fp8 $(du -sb "$work/glm52" | awk '{printf "%.2f GB", $1/1e9}')"
measure_family "colibri-glm53 (FP8 experts -> int4-g64, rest BF16)" "$work/glm53"
measure_family "colibri-glm (FP8 -> int4-g64)" "$work/glm52" --to int4-g64
printf 'colibri-glm53 / colibri-glm, each against its own floor: %s (target <= 1.10: the same I/O-floor ratio)\n' \
  "$(ratio "$(cat "$work/ratio-colibri-glm53")" "$(cat "$work/ratio-colibri-glm")")"
rm -rf "$work/glm53" "$work/glm52"

echo
echo "== container targets from BF16 at about 1 GB (Qwen3-30B-A3B widths), whole process, 2 threads, best of 5 (target: <= 1.3x the floor)"
"$qrepack" fixture qwen3-moe --scale-gb 1 -o "$work/qwen3moe" >/dev/null
"$qrepack" fixture qwen3 --scale-gb 1 -o "$work/qwen3" >/dev/null
measure_family "colibri-qwen36 (BF16 experts -> merged int4-row)" "$work/qwen3moe"
measure_family "colibri-qwen3 (BF16 -> 2-D int4-g64, F16 rest)" "$work/qwen3"
rm -rf "$work/qwen3moe" "$work/qwen3"
"$qrepack" fixture olmoe-bench -o "$work/olmoe" >/dev/null
measure_family "colibri-olmoe (BF16 experts -> merged int8-row)" "$work/olmoe"
rm -rf "$work/olmoe"
"$qrepack" fixture olmoe-gguf-bench -o "$work/olmoe-gguf" >/dev/null
measure_family "colibri-olmoe from GGUF (Q4_0 / Q6_K -> int8-row)" "$work/olmoe-gguf"
rm -rf "$work/olmoe-gguf"
"$qrepack" fixture kimi-k3-bench -o "$work/kimi" >/dev/null
measure_family "colibri-kimi-k3 (MXFP4 copied, shared int8/int4)" "$work/kimi"
rm -rf "$work/kimi"
"$qrepack" fixture inkling-bench -o "$work/inkling" >/dev/null
measure_family "colibri-inkling (interleaved w13 -> int4-row)" "$work/inkling"
rm -rf "$work/inkling"
