# Independent derivation of the GLM-5.3-Flash container (the engine's convert_glm53.py as
# reference/colibri-engines.md §1.3 describes it): every output file rebuilt byte for byte
# from the source checkpoint and compared whole.
#   name rules (first match): <w>_scale_inv consumed; ".mlp.experts." + ends ".weight" ->
#   int4-g64; a KEEP_F32 substring -> F32; a KNOWN_BF16 substring -> BF16 (nearest even).
#   FP8 E4M3 weights are multiplied by their 128x128 block scale (f32) first.
#   int4-g64: s = max(f32(amax / 7), f32(1e-8)) per row and 64 columns, q = clip(rint(x / s),
#   -8, 7), nibble q + 8 with element 2k low; <w> U8 [O*I/2] + <w>.qs F32 [O*I/64].
#   files: one per source shard, same name; header {"__metadata__":{"format":"pt"}, ...}
#   compact JSON padded with spaces to 8 bytes, tensors F32 then BF16 then U8, each by name.
#   generation_config.json, when the source has none: {"eos_token_id": [ids]} (indent 2).
#   glm53.py SRC_DIR OUT_DIR
import json
import os
import struct
import sys

import numpy as np

from st_formats import bf16, e4m3_table, read_raw

E4M3 = e4m3_table()
KEEP_F32 = ["hc_attn_base", "hc_attn_fn", "hc_attn_scale", "hc_ffn_base", "hc_ffn_fn",
            "hc_ffn_scale", "dt_bias", "A_log", "e_score_correction_bias",
            "index_kpool_compress_ape", "norm.weight", "norm.bias", "layernorm.weight",
            "o_norm.weight", ".bias"]
KNOWN_BF16 = ["embed_tokens.weight", "lm_head.weight", "mlp.gate.weight", "mlp.gate_proj.weight",
              "mlp.up_proj.weight", "mlp.down_proj.weight", "shared_experts.gate_proj.weight",
              "shared_experts.up_proj.weight", "shared_experts.down_proj.weight", "q_proj.weight",
              "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_a_proj.weight",
              "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_b_proj.weight",
              "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight", "f_a_proj.weight",
              "f_b_proj.weight", "b_proj.weight", "g_a_proj.weight", "g_b_proj.weight",
              "indexer.wq_b.weight", "indexer.wk.weight", "indexer.weights_proj.weight",
              "index_kpool_compress_gate", "eh_proj.weight", "visual.patch_embed.proj.weight",
              "visual.downsample.weight", "visual.merger.proj.weight",
              "visual.merger.gate_proj.weight", "visual.merger.up_proj.weight",
              "visual.merger.down_proj.weight", "attn.qkv.weight", "attn.proj.weight", "blocks.",
              "post_layernorm.weight"]
WIDTH = {"F32": 4, "BF16": 2, "U8": 1}


def kind(n):
    if ".mlp.experts." in n and n.endswith(".weight"):
        return "expert"
    if any(k in n for k in KEEP_F32):
        return "F32"
    if any(k in n for k in KNOWN_BF16):
        return "BF16"
    raise SystemExit(f"{n}: no rule claims it")


def as_f32(src, name):
    dt, shape, raw = src[name]
    if dt == "F32":
        return raw.view("<f4").reshape(shape)
    if dt == "BF16":
        return bf16(raw, shape)
    assert dt == "F8_E4M3", (name, dt)
    sd, ss, sraw = src[name + "_scale_inv"]
    s = sraw.view("<f4").reshape(ss) if sd == "F32" else bf16(sraw, ss)
    full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:shape[0], :shape[1]]
    return E4M3[raw].reshape(shape) * full


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def int4_g64(w):
    o, i = w.shape
    g = w.reshape(o, i // 64, 64)
    s = np.maximum(np.abs(g).max(axis=2) / np.float32(7), np.float32(1e-8)).astype(np.float32)
    q = (np.clip(np.rint(g / s[:, :, None]), -8, 7).astype(np.int32) + 8).reshape(o, i)
    q = q.astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).tobytes(), s.astype("<f4").tobytes()


def expected_file(src_shard, src):
    out = {}  # name -> (dtype, shape, bytes)
    for n in src_shard:
        if n.endswith("_scale_inv"):
            continue
        k = kind(n)
        x = as_f32(src, n)
        if k == "expert":
            d, s = int4_g64(x)
            out[n] = ("U8", [len(d)], d)
            out[n + ".qs"] = ("F32", [len(s) // 4], s)
        elif k == "F32":
            out[n] = ("F32", list(x.shape), x.astype("<f4").tobytes())
        else:
            out[n] = ("BF16", list(x.shape), to_bf16(x).tobytes())
    names = sorted(out, key=lambda n: (-WIDTH[out[n][0]], n))
    header, data, off = {"__metadata__": {"format": "pt"}}, b"", 0
    for n in names:
        dt, shape, b = out[n]
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    src_dir, out_dir = sys.argv[1], sys.argv[2]
    shards = sorted(f for f in os.listdir(src_dir) if f.endswith(".safetensors"))
    per_shard = {f: read_raw(os.path.join(src_dir, f)) for f in shards}
    src = {}
    for t in per_shard.values():
        src.update(t)
    for f in shards:
        want = expected_file(per_shard[f], src)
        got = open(os.path.join(out_dir, f), "rb").read()
        if got != want:
            n = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
            raise SystemExit(f"{f}: differs from the derivation at byte {n} "
                             f"({len(got)} vs {len(want)} bytes)")
    if not os.path.exists(os.path.join(src_dir, "generation_config.json")):
        cfg = json.load(open(os.path.join(src_dir, "config.json")))
        eos = cfg.get("eos_token_id", cfg.get("text_config", {}).get("eos_token_id"))
        want = json.dumps({"eos_token_id": eos if isinstance(eos, list) else [eos]}, indent=2)
        if open(os.path.join(out_dir, "generation_config.json")).read() != want + "\n":
            raise SystemExit("generation_config.json differs from the derivation")
    print(f"glm53: {len(shards)} files equal the derivation")


if __name__ == "__main__":
    main()
