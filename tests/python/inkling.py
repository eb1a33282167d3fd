#!/usr/bin/env python3
"""Independent derivation of qrepack's two Inkling targets, written from the converters' rules
(the notes on convert_inkling_int4.py / convert_inkling_dense_int4.py), not from qrepack's code.
Rebuilds every expected output file byte for byte with numpy and compares.

  inkling.py int4  SRC OUT [--bits 4|8]       SRC: release layout; OUT: colibri-inkling output
  inkling.py dense CONT OUT [--attn-bits 8|4]  CONT: a colibri-inkling dir; OUT: overlay output
  inkling.py make OUT [--inter N] [--hidden N] [--drop NAME]   a small checkpoint to refuse

Exit 0 when every byte matches, 1 with one line per difference otherwise.
"""
import glob
import json
import os
import re
import struct
import sys

import numpy as np

WIDTH = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "U8": 1, "I8": 1, "I64": 8, "I32": 4}
# safetensors' Dtype enum order; save_file lays tensors out by dtype descending, then name.
RANK = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
        "F32", "F64", "I64", "U64"]


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], list(v["shape"]), data[base + a:base + b])
    return out


def to_f32(dtype, raw, shape):
    if dtype == "BF16":
        u = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, np.float16).astype(np.float32).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(raw, np.float32).reshape(shape)
    raise ValueError(dtype)


def header_bytes(entries, meta_last=None):
    """entries: list of (name, dtype, shape, nbytes) in file order; compact JSON, padded to 8."""
    parts, off = [], 0
    for name, dt, shape, nb in entries:
        parts.append(json.dumps(name) + ":" + json.dumps(
            {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}, separators=(",", ":")))
        off += nb
    if meta_last is not None:
        parts.append('"__metadata__":' + json.dumps(meta_last, separators=(",", ":")))
    js = ("{" + ",".join(parts) + "}").encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    return struct.pack("<Q", len(js)) + js


def save_file_bytes(tensors):
    """tensors: name -> (dtype, shape, bytes), laid out as safetensors' save_file does."""
    order = sorted(tensors, key=lambda k: (-RANK.index(tensors[k][0]), k))
    hdr = header_bytes([(k, tensors[k][0], tensors[k][1], len(tensors[k][2])) for k in order])
    return hdr + b"".join(tensors[k][2] for k in order)


# ---------------- int4 / int8 target ----------------

LAYER_MAP = {  # release suffix -> container suffix (the release layout, reference/colibri-engines.md section 1.13)
    "attn_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "attn.wq_du.weight": "self_attn.q_proj.weight",
    "attn.wk_dv.weight": "self_attn.k_proj.weight",
    "attn.wv_dv.weight": "self_attn.v_proj.weight",
    "attn.wr_du.weight": "self_attn.r_proj.weight",
    "attn.wo_ud.weight": "self_attn.o_proj.weight",
    "attn.q_norm.weight": "self_attn.q_norm.weight",
    "attn.k_norm.weight": "self_attn.k_norm.weight",
    "attn.k_sconv.weight": "self_attn.k_sconv.conv1d.weight",
    "attn.v_sconv.weight": "self_attn.v_sconv.conv1d.weight",
    "attn.rel_logits_proj.proj": "self_attn.rel_logits_proj.proj",
    "attn_sconv.weight": "attn_sconv.conv1d.weight",
    "mlp_sconv.weight": "mlp_sconv.conv1d.weight",
    "mlp.w2_md.weight": "mlp.down_proj.weight",
    "mlp.global_scale": "mlp.global_scale",
    "mlp.gate.weight": "mlp.gate.weight",
    "mlp.gate.bias": "mlp.gate.e_score_correction_bias",
    "mlp.gate.global_scale": "mlp.gate.global_scale",
    "mlp.shared_experts.shared_w2_weight": "mlp.shared_experts.down_proj",
}
GLOBAL_MAP = {
    "model.llm.embed.weight": "model.embed_tokens.weight",
    "model.llm.embed_norm.weight": "model.embed_norm.weight",
    "model.llm.norm.weight": "model.norm.weight",
    "model.llm.unembed.weight": "lm_head.weight",
}
SMALL_F32 = re.compile(r"(norm\.weight$|layernorm\.weight$|rel_logits_proj\.proj$|conv1d\.weight$"
                       r"|global_scale$|e_score_correction_bias$|\.mlp\.gate\.weight$)")


def quant_rows(w, bits):
    """Per-row symmetric: s = max|w| / qmax in f32, floored at 1e-8; rint half-even."""
    qmax = np.float32(7 if bits == 4 else 127)
    s = (np.abs(w).max(axis=1) / qmax).astype(np.float32)
    s[s < np.float32(1e-8)] = np.float32(1e-8)
    q = np.clip(np.rint(w / s[:, None]), -8 if bits == 4 else -128, qmax).astype(np.int32)
    if bits == 4:
        b = (q + 8).astype(np.uint8)
        packed = b[:, 0::2] | (b[:, 1::2] << 4)
    else:
        packed = q.astype(np.int8).view(np.uint8)
    return packed.tobytes(), s.astype("<f4").tobytes()


def even_odd(a, axis):
    """The grouped halves of a gate/up-interleaved axis: (even rows, odd rows)."""
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(0, None, 2)
    ev = a[tuple(idx)]
    idx[axis] = slice(1, None, 2)
    return ev, a[tuple(idx)]


def expect_int4(src, bits):
    shards = sorted(glob.glob(os.path.join(src, "model-*.safetensors")))
    files = {}
    for sp in shards:
        m = re.fullmatch(r"model-(\d+)-of-\d+\.safetensors", os.path.basename(sp))
        out_name = f"out-{m.group(1)}.safetensors" if m else "out-" + os.path.basename(sp)
        t = read_st(sp)
        out = {}
        for name, (dt, shape, raw) in t.items():
            if name.startswith(("model.audio.", "model.visual.", "model.mtp.")):
                continue
            if name in GLOBAL_MAP:
                hf = GLOBAL_MAP[name]
                suffix = None
            else:
                mm = re.fullmatch(r"model\.llm\.layers\.(\d+)\.(.+)", name)
                assert mm, name
                pre, suffix = f"model.layers.{mm.group(1)}.", mm.group(2)
                hf = pre + LAYER_MAP[suffix] if suffix in LAYER_MAP else None
            if suffix == "mlp.w13_dn.weight":  # [2Id, H] rows g0,u0,... -> gate, up
                arr = np.frombuffer(raw, np.uint8).reshape(shape[0], -1)
                g, u = even_odd(arr, 0)
                out[pre + "mlp.gate_proj.weight"] = (dt, [shape[0] // 2, shape[1]], g.tobytes())
                out[pre + "mlp.up_proj.weight"] = (dt, [shape[0] // 2, shape[1]], u.tobytes())
            elif suffix == "mlp.shared_experts.shared_w13_weight":
                arr = np.frombuffer(raw, np.uint8).reshape(shape[0], shape[1], -1)
                g, u = even_odd(arr, 1)
                sh = [shape[0], shape[1] // 2, shape[2]]
                out[pre + "mlp.shared_experts.gate_proj"] = (dt, sh, g.tobytes())
                out[pre + "mlp.shared_experts.up_proj"] = (dt, sh, u.tobytes())
            elif suffix in ("mlp.experts.w13_weight", "mlp.experts.w2_weight"):
                w = to_f32(dt, raw, shape)
                e_n, r, c = shape
                if suffix.endswith("w13_weight"):
                    g, u = even_odd(w, 1)
                    w = np.concatenate([g, u], axis=1)  # per expert: gate rows then up rows
                    hf = pre + "mlp.experts.gate_up_proj"
                else:
                    hf = pre + "mlp.experts.down_proj"
                q, s = quant_rows(np.ascontiguousarray(w.reshape(e_n * r, c)), bits)
                out[hf] = ("U8", [len(q)], q)
                out[hf + ".qs"] = ("F32", [e_n * r], s)
            else:
                assert hf is not None, name
                if SMALL_F32.search(hf):
                    out[hf] = ("F32", shape, to_f32(dt, raw, shape).astype("<f4").tobytes())
                else:
                    out[hf] = (dt, shape, raw)
        if out:  # qrepack writes no file for a shard left empty
            files[out_name] = save_file_bytes(out)
    for side in ("config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "chat_template.jinja"):
        p = os.path.join(src, side)
        if os.path.exists(p):
            files[side] = open(p, "rb").read()
    return files


# ---------------- dense overlay ----------------

def dense_kind(name, shape, dtype, attn_bits):
    if re.search(r"\.experts\.", name) and "shared_experts" not in name:
        return "skip"
    if dtype not in ("BF16", "F16", "F32"):
        return "raw"
    if re.search(r"(embed_tokens|lm_head)", name):
        return "int8"
    if re.search(r"(norm|bias|A_log|dt_bias|conv1d|\.gate\.|rotary|scale$)", name, re.I):
        return "raw"
    if "self_attn" in name and attn_bits == 8:
        return "int8"
    n = int(np.prod(shape)) if shape else 1
    if len(shape) < 2 or shape[-1] < 64 or n < (1 << 20):
        return "raw"
    return "gs4"


def int8_rows(w):
    s = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    s[s == 0] = np.float32(1)
    q = np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8)
    return q.tobytes(), s.astype("<f4").tobytes()


def int4_g64(w):
    r, i = w.shape
    ng = (i + 63) // 64
    wp = np.zeros((r, ng * 64), np.float32)
    wp[:, :i] = w
    g = wp.reshape(r, ng, 64)
    s = (np.abs(g).max(axis=2) / np.float32(7)).astype(np.float32)
    s[s == 0] = np.float32(1)
    q = (np.clip(np.rint(g / s[:, :, None]), -8, 7).astype(np.int32) + 8).reshape(r, ng * 64)[:, :i]
    if i % 2:
        q = np.concatenate([q, np.full((r, 1), 8, np.int32)], axis=1)
    q = q.astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).tobytes(), s.astype("<f4").tobytes()


def expect_dense(cont, attn_bits):
    index = {}
    for fn in sorted(os.listdir(cont)):
        if fn.endswith(".safetensors") and not fn.startswith("dense-"):
            index.update(read_st(os.path.join(cont, fn)))
    entries, blobs, meta = [], [], {}
    for name in sorted(index):
        dt, shape, raw = index[name]
        kind = dense_kind(name, shape, dt, attn_bits)
        if kind == "skip":
            continue
        dims = "x".join(str(d) for d in shape)
        if kind == "raw":
            entries.append((name, dt, shape, len(raw)))
            blobs.append(raw)
            meta[name] = "fmt=raw"
            continue
        i = shape[-1]
        w = to_f32(dt, raw, shape).reshape(-1, i)
        r = w.shape[0]
        if kind == "int8":
            q, s = int8_rows(w)
            entries += [(name, "I8", [r, i], len(q)), (name + ".qs", "F32", [r], len(s))]
            meta[name] = f"fmt=1;orig={dims}"
        else:
            q, s = int4_g64(w)
            ng = (i + 63) // 64
            entries += [(name, "U8", [r, (i + 1) // 2], len(q)),
                        (name + ".qs", "F32", [r, ng], len(s))]
            meta[name] = f"fmt=4;gs=64;I={i};orig={dims}"
        blobs += [q, s]
    meta["colibri.dense"] = "inkling-int4g64-v1"
    return {"dense.safetensors": header_bytes(entries, meta) + b"".join(blobs)}


def make_checkpoint(out, inter, hidden, drop, dtype="BF16", nan=None):
    """A minimal release-layout checkpoint (one shard, no index) for refusal tests: 2 layers,
    layer 0 dense, layer 1 MoE, MoE width `inter`, hidden `hidden`, all `dtype` (BF16, F16 or
    F32), less `drop`; `nan` = (name, flat index) of one element made NaN."""
    rng = np.random.default_rng(1)
    h, v, e, s, idn, k = hidden, 64, 4, 1, 64, 4
    heads, kv, hd, drel = 2, 1, 16, 4
    shapes = {"model.llm.embed.weight": [v, h], "model.llm.norm.weight": [h],
              "model.llm.unembed.weight": [v, h]}
    for l in range(2):
        p = f"model.llm.layers.{l}."
        shapes.update({p + "attn_norm.weight": [h], p + "mlp_norm.weight": [h],
                       p + "attn.wq_du.weight": [heads * hd, h],
                       p + "attn.wk_dv.weight": [kv * hd, h], p + "attn.wv_dv.weight": [kv * hd, h],
                       p + "attn.wr_du.weight": [heads * drel, h],
                       p + "attn.wo_ud.weight": [h, heads * hd], p + "attn.q_norm.weight": [hd],
                       p + "attn.k_norm.weight": [hd], p + "attn.k_sconv.weight": [kv * hd, 1, k],
                       p + "attn.v_sconv.weight": [kv * hd, 1, k],
                       p + "attn.rel_logits_proj.proj": [drel, 8],
                       p + "attn_sconv.weight": [h, 1, k], p + "mlp_sconv.weight": [h, 1, k]})
    p = "model.llm.layers.0."
    shapes.update({p + "mlp.w13_dn.weight": [2 * idn, h], p + "mlp.w2_md.weight": [h, idn]})
    p = "model.llm.layers.1."
    shapes.update({p + "mlp.gate.weight": [e + s, h], p + "mlp.gate.bias": [e],
                   p + "mlp.experts.w13_weight": [e, 2 * inter, h],
                   p + "mlp.experts.w2_weight": [e, h, inter],
                   p + "mlp.shared_experts.shared_w13_weight": [s, 2 * inter, h],
                   p + "mlp.shared_experts.shared_w2_weight": [s, h, inter]})
    t = {}
    for name, shape in shapes.items():
        if name in drop:
            continue
        x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if nan and nan[0] == name:
            x.reshape(-1)[nan[1]] = np.nan
        if dtype == "BF16":
            raw = (x.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = x.astype("<f2" if dtype == "F16" else "<f4").tobytes()
        t[name] = (dtype, shape, raw)
    os.makedirs(out)
    with open(os.path.join(out, "model-00001-of-00001.safetensors"), "wb") as f:
        f.write(save_file_bytes(t))
    text = {"hidden_size": h, "num_hidden_layers": 2, "vocab_size": v, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hd, "swa_num_attention_heads": heads,
            "swa_num_key_value_heads": kv, "swa_head_dim": hd, "sliding_window_size": 8,
            "d_rel": drel, "rel_extent": 8, "local_layer_ids": [], "dense_mlp_idx": 1,
            "intermediate_size": inter, "dense_intermediate_size": idn, "n_routed_experts": e,
            "num_experts_per_tok": 2, "n_shared_experts": s, "sconv_kernel_size": k}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "inkling_mm_model", "text_config": text}, f, indent=2)
    return 0


def main():
    if sys.argv[1] == "make":
        rest = sys.argv[3:]
        inter = int(rest[rest.index("--inter") + 1]) if "--inter" in rest else 16
        hidden = int(rest[rest.index("--hidden") + 1]) if "--hidden" in rest else 32
        drop = [rest[i + 1] for i, a in enumerate(rest) if a == "--drop"]
        dtype = rest[rest.index("--dtype") + 1] if "--dtype" in rest else "BF16"
        nan = None
        if "--nan" in rest:
            name, index = rest[rest.index("--nan") + 1].rsplit(":", 1)
            nan = (name, int(index))
        return make_checkpoint(sys.argv[2], inter, hidden, drop, dtype, nan)
    mode, src, out = sys.argv[1:4]
    rest = sys.argv[4:]
    if mode == "int4":
        bits = int(rest[rest.index("--bits") + 1]) if "--bits" in rest else 4
        want = expect_int4(src, bits)
    else:
        ab = int(rest[rest.index("--attn-bits") + 1]) if "--attn-bits" in rest else 8
        want = expect_dense(src, ab)
    got = sorted(f for f in os.listdir(out) if f != "qrepack.json")
    bad = []
    if got != sorted(want):
        bad.append(f"files: got {got}, want {sorted(want)}")
    for name, data in sorted(want.items()):
        p = os.path.join(out, name)
        if not os.path.exists(p):
            continue
        have = open(p, "rb").read()
        if have != data:
            at = next((k for k in range(min(len(have), len(data))) if have[k] != data[k]),
                      min(len(have), len(data)))
            bad.append(f"{name}: {len(have)} bytes vs {len(data)} expected, first difference at "
                       f"byte {at}")
    for line in bad:
        print("inkling.py:", line, file=sys.stderr)
    checked = sum(len(v) for v in want.values())
    if not bad:
        print(f"inkling.py {mode}: {len(want)} files, {checked} bytes identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
