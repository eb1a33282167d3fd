#!/usr/bin/env bash
# make demo: qrepack's main job on built-in fixtures, end to end, printed as a user sees it.
set -euo pipefail
qrepack=${1:?usage: demo.sh PATH_TO_QREPACK}
work=$(mktemp -d /tmp/qrepack-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }
fails() {  # runs a command that must fail, shows its message and exit code
  printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "${*:2}"
  set +e; "${@:2}" 2>&1; rc=$?; set -e
  echo "(exit code $rc)"
  [ "$rc" -ne 0 ]
}

step "Generate a tiny GLM-MoE FP8 checkpoint (real names, shapes, dtypes, DSA indexer, MTP layer; trained-like values) and its oracle" \
  "$qrepack" fixture moe-fp8 --oracle -o "$work/glm-fp8"
echo "ref_glm.json (the engine scores itself against this: TF=1 -> K/32, greedy -> K/20):"
cat "$work/glm-fp8/ref_glm.json"
step "Inspect layer 3 (first MoE layer): attention and routed expert 5" \
  "$qrepack" inspect "$work/glm-fp8" --filter 'layers\.3\.(self_attn\.q|mlp\.(gate|experts\.5\.))'
echo
echo "Whole-checkpoint summary:"
"$qrepack" inspect "$work/glm-fp8" | sed -n '/^DTYPE/,$p'
step "Convert to the C engine's grouped int4 (g32 here; hidden is 128), int8 for embeddings" \
  "$qrepack" convert "$work/glm-fp8" -o "$work/glm-int4" --to int4-g32
step "Measure the error against the FP8 source, decoded as the engine decodes it" \
  "$qrepack" verify "$work/glm-fp8" "$work/glm-int4" --max-rel-err 0.25
step "The MTP head and the DSA indexer as passes of their own, beside the main conversion (int8-row by default; the main shards are not touched)" \
  "$qrepack" convert "$work/glm-fp8" --mtp -o "$work/glm-int4"
"$qrepack" convert "$work/glm-fp8" --indexer -o "$work/glm-int4" | sed -n '1p;$p'
step "The engine's other containers: int3-g64, int2-row, and FP8 passthrough (codes copied bitwise, residents stamped fp8-e4m3-b128 so the engine never reads them as int8)" \
  "$qrepack" convert "$work/glm-fp8" -o "$work/glm-int3" --to int3-g64 --bits down=8
for scheme in int2-row fp8-passthrough; do
  "$qrepack" convert "$work/glm-fp8" -o "$work/glm-$scheme" --to "$scheme" | tail -n 1
done
"$qrepack" verify "$work/glm-fp8" "$work/glm-fp8-passthrough" | grep -E "^(CLASS|experts|all) "
for scheme in int8-row int4-g64 int4-row; do
  "$qrepack" convert "$work/glm-fp8" -o "$work/$scheme" --to "$scheme" >/dev/null
done
step "Model level: each conversion's next-token predictions against the FP8 source (reference forward pass, teacher-forced; grouped int4 must stay closer than per-row)" \
  "$qrepack" eval "$work/glm-fp8" "$work/int8-row" "$work/int4-g64" "$work/int4-row" \
  --sequences 16 --length 64
step "Gate a conversion at the model level (exit 1 below the bar)" \
  "$qrepack" eval "$work/glm-fp8" "$work/int8-row" --min-top1 0.9 --max-kl 0.05
fails "... and a conversion that falls below it exits 1" \
  "$qrepack" eval "$work/glm-fp8" "$work/int4-row" --min-top1 0.9
"$qrepack" fixture moe-fp8 --preset tiny-e8 -o "$work/glm-e8-src" >/dev/null
step "E8/IQ3 (engine fmt 6, 3.06 bits per weight) for the routed experts of a model whose expert widths are multiples of 256: rows rotated, then encoded as the engine converter's reference encoder does" \
  "$qrepack" convert "$work/glm-e8-src" -o "$work/glm-e8" --bits experts=e8 --to int4-g64
"$qrepack" convert "$work/glm-e8-src" -o "$work/glm-e8-g64" --to int4-g64 >/dev/null
step "... its experts decoded (rotated back) against the source, and the model next to int4-g64" \
  "$qrepack" eval "$work/glm-e8-src" "$work/glm-e8" "$work/glm-e8-g64"
fails "... e8 must cover gate, up and down together" \
  "$qrepack" convert "$work/glm-e8-src" -o "$work/glm-e8-bad" --bits gate=e8
fails "... and input widths that are multiples of 256 (the tiny model's are 128 and 32)" \
  "$qrepack" convert "$work/glm-fp8" -o "$work/glm-e8-bad" --bits experts=e8
"$qrepack" fixture minimax --encoding nvfp4-ct -o "$work/minimax-nvfp4" >/dev/null
"$qrepack" fixture llama --encoding fp8-tensor -o "$work/llama-fp8" >/dev/null
step "Same model from HF fused experts: unfused before anything else, nothing lost" \
  "$qrepack" fixture moe-fp8 --fused-experts -o "$work/glm-fused"
"$qrepack" convert "$work/glm-fused" -o "$work/glm-fused-int4" --to int4-g32 | tail -n 2
printf '\n\033[1m== %s\033[0m\n$ %s\n' "Every container qrepack writes and the runtime that loads it (qrepack targets: schemes, --bits, flags and refusals too; --json)" "qrepack targets | grep 'loaded by'"
"$qrepack" targets | grep 'loaded by'
step "Each family in the container its own engine runtime loads: a Qwen3.6-style hybrid (Gated DeltaNet + gated attention, fused experts, MTP, vision) into qwen36.c's container, with the oracle qwen36.c scores itself against (ref_qwen36.json)" \
  "$qrepack" fixture qwen36 --oracle -o "$work/qwen36"
"$qrepack" convert "$work/qwen36" -o "$work/qwen36-int4" --to int4-g32 --bits down=8
echo "qwen36_meta.json (what qwen36.c reads):"
head -c 400 "$work/qwen36-int4/qwen36_meta.json"; echo " ..."
step "OLMoE into olmoe.c's merged int8 experts; dense Qwen3 into qwen3.c's 2-D int4-g64; Llama staged as llama.c reads it (hard links, SHA-256 in llama_meta.json)" \
  "$qrepack" fixture olmoe -o "$work/olmoe"
"$qrepack" convert "$work/olmoe" -o "$work/olmoe-int8" | tail -n 2
"$qrepack" fixture qwen3 -o "$work/qwen3" >/dev/null
"$qrepack" convert "$work/qwen3" -o "$work/qwen3-int4" | tail -n 2
"$qrepack" fixture llama -o "$work/llama" >/dev/null
"$qrepack" convert "$work/llama" -o "$work/llama-staged" | tail -n 2
step "Model level for those runtimes: each container's predictions against its source (the hybrid's DeltaNet and merged nibble experts, OLMoE's merged int8, Qwen3's 2-D int4-g64 read as the runtimes read them)" \
  "$qrepack" eval "$work/qwen36" "$work/qwen36-int4" --sequences 4 --length 24
"$qrepack" eval "$work/olmoe" "$work/olmoe-int8" --sequences 4 --length 24 | sed -n 3p
"$qrepack" eval "$work/qwen3" "$work/qwen3-int4" --sequences 4 --length 24 | sed -n 3p
step "The newest families: GLM-5.3-Flash (KDA + MLA/DSA layers, mHC, FP8 experts, MTP, vision) into glm53.c's container: names kept, experts int4-g64, the rest BF16 or F32 by name" \
  "$qrepack" fixture glm53 -o "$work/glm53"
"$qrepack" convert "$work/glm53" -o "$work/glm53-int4"
fails "... and given to the GLM-5.2 runtime's target, refused before any output (what upstream #1368 needed)" \
  "$qrepack" convert "$work/glm53" -o "$work/never-written" --target colibri-glm
step "Qwen3.8-Flash-Next's official FP8 release (routed experts with BF16 block scales) into the experts-int4g64/ sidecar its runtime finds inside the snapshot (Q38_EXPERT_INT4)" \
  "$qrepack" fixture qwen38-fp8 -o "$work/qwen38-fp8"
"$qrepack" convert "$work/qwen38-fp8" -o "$work/qwen38-fp8/experts-int4g64" | tail -n 4
echo "index.json:"
head -c 300 "$work/qwen38-fp8/experts-int4g64/index.json"; echo " ..."
step "Inkling in its release's own names (interleaved gate/up), with the oracle inkling.c scores itself against (ref_inkling.json), into inkling.c's container: renamed, de-interleaved, per-row int4 experts" \
  "$qrepack" fixture inkling --oracle -o "$work/inkling"
"$qrepack" convert "$work/inkling" -o "$work/inkling-int4" | tail -n 3
"$qrepack" eval "$work/inkling" "$work/inkling-int4" --sequences 4 --length 24 | sed -n 3p
step "... and its optional dense overlay (int8 attention and embeddings, int4-g64 large matrices), which the engine reads from dense-int4g64/ (and so does eval)" \
  "$qrepack" convert "$work/inkling-int4" -o "$work/inkling-int4/dense-int4g64" --target colibri-inkling-dense
"$qrepack" eval "$work/inkling" "$work/inkling-int4" --sequences 4 --length 24 | sed -n 3p
step "Kimi K3 as released (language_model. names, KDA + gated MLA, MXFP4 routed experts): kimi_k3.c runs these files as downloaded, so check-load checks them as its loader does" \
  "$qrepack" fixture kimi-k3 -o "$work/kimi-k3"
"$qrepack" check-load "$work/kimi-k3"
step "... or k3_repack.py's container: experts copied byte for byte in expert order (read back after writing), BF16 projections int8 per row or int4-g64, vision dropped" \
  "$qrepack" convert "$work/kimi-k3" -o "$work/kimi-k3-int4" --to int4-g64
step "The same repack as three workers (what a Slurm array or a Kubernetes Indexed Job runs: --shard I/N), then merge: every file byte-identical with the single run" \
  "$qrepack" convert "$work/kimi-k3" -o "$work/kimi-k3-parts" --to int4-g64 --shard 0/3
"$qrepack" convert "$work/kimi-k3" -o "$work/kimi-k3-parts" --to int4-g64 --shard 1/3 | tail -n 1
"$qrepack" convert "$work/kimi-k3" -o "$work/kimi-k3-parts" --to int4-g64 --shard 2/3 | tail -n 1
"$qrepack" merge "$work/kimi-k3-parts" | tail -n 1
diff -r "$work/kimi-k3-int4" "$work/kimi-k3-parts"
echo "identical: $(ls "$work/kimi-k3-parts" | wc -l) files"
fails "No output without a reader: a Llama checkpoint in FP8 has no runtime that loads it" \
  "$qrepack" convert "$work/llama-fp8" -o "$work/never-written"
fails "... nor does a MiniMax one (the GLM runtime needs MLA); --target generic would write the GLM-style container anyway" \
  "$qrepack" convert "$work/minimax-nvfp4" -o "$work/never-written"
step "--target generic, asked for explicitly: MiniMax in NVFP4 (compressed-tensors), names mapped as the engine's converter maps them, to the GLM-style container" \
  "$qrepack" convert "$work/minimax-nvfp4" -o "$work/minimax-int4" --to int4-g64 --target generic
"$qrepack" verify "$work/minimax-nvfp4" "$work/minimax-int4" | tail -n 1
step "Round trip: reshard into 100 kB shards, re-read and compare every tensor" \
  "$qrepack" reshard "$work/glm-fp8" -o "$work/resharded" --max-shard-size 100kB
# A model hub on loopback serving the FP8 checkpoint (scripts/demo-hub.sh).
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/demo-hub.sh" "$qrepack" "$work"
step "A family the engine runs as downloaded: DeepSeek V4.1 Flash's release layout (FP8 32x32 UE8M0 tiles, FP4 experts, engram)" \
  "$qrepack" fixture deepseek-v41 -o "$work/dsv41"
step "Will it load? check-load mirrors deepseek_v41.c's loader on the vendor directory" \
  "$qrepack" check-load "$work/dsv41"
step "Will it decode? verify without an output decodes every weight (32x32 tiles, MXFP4, engram row groups)" \
  "$qrepack" verify "$work/dsv41"
fails "convert has nothing to do there: one line naming the runtime" \
  "$qrepack" convert "$work/dsv41" -o "$work/dsv41-never-written"
# A file whose data_offsets disagree with its shape: BF16 [4] needs 8 bytes, offsets say 9.
header='{"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,9]}}'
{ printf "$(printf '\\x%02x' "${#header}")\0\0\0\0\0\0\0"; printf '%s' "$header"; printf '123456789'; } \
  > "$work/bad.safetensors"
fails "A hand-made bad file gets one clear line and exit code 2" \
  "$qrepack" inspect "$work/bad.safetensors"
"$qrepack" reshard "$work/glm-fp8" -o "$work/holed" --drop '^model\.layers\.3\.mlp\.experts\.5\.' >/dev/null
fails "A checkpoint missing one routed expert is refused before anything is written" \
  "$qrepack" convert "$work/holed" -o "$work/never-written"
fails "Refusing to overwrite the input" \
  "$qrepack" reshard "$work/glm-fp8" -o "$work/glm-fp8"
mkfifo "$work/stuck.safetensors"
fails "A FIFO posing as a checkpoint is refused at once, not read (no hang)" \
  "$qrepack" inspect "$work/stuck.safetensors"

step "Omega: a synthetic dit_svdquant_v1 pack with pi0.5's names (4 records)" \
  "$qrepack" fixture omega-pack -o "$work/pack.pt"
step "Validate every record (CPU only, writes nothing)" \
  "$qrepack" validate "$work/pack.pt"
step "How E0M3 serves expert q_proj: Omega fake quant vs S0 (production) vs S1 (mean fold)" \
  "$qrepack" check "$work/pack.pt" --s1
step "Convert to FlashRT's omega_e0m3_v1 artifact (bit-exact E0M3 + CUTLASS SFB)" \
  "$qrepack" convert "$work/pack.pt" --to e0m3-sfb --fold none -o "$work/e0m3.pt"
step "Gate the artifact: GEMM from its stored bytes only" \
  "$qrepack" check "$work/pack.pt" --artifact "$work/e0m3.pt" --min-artifact-cos 0.98
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  step "PyTorch loads it with weights_only=True" \
    /usr/bin/python3 -c "import torch; a=torch.load('$work/e0m3.pt', weights_only=True); print(a['format'], len(a['weights']), 'weights')"
fi
step "A synthetic MIP-QAT pi0.5 checkpoint: the action expert's 126 projections, real names" \
  "$qrepack" fixture qat -o "$work/qat.safetensors"
step "Convert it to the same FlashRT artifact (as the fork's convert_qat_ckpt_e0m3.py writes it)" \
  "$qrepack" convert "$work/qat.safetensors" --to e0m3-sfb -o "$work/qat_e0m3.pt"
step "Gate it against the checkpoint's fp16 weights" \
  "$qrepack" check "$work/qat.safetensors" --artifact "$work/qat_e0m3.pt"
fails "Refusing to overwrite the pack" \
  "$qrepack" convert "$work/pack.pt" --to e0m3-sfb -o "$work/pack.pt"
echo
echo "demo finished: all steps behaved as shown."
