# Independent numpy derivation of the four engine containers qrepack writes (qwen36, qwen3,
# olmoe, llama), from the source checkpoint's own bytes and the upstream converters' written
# specs (never from qrepack's code):
#   container_targets.py TARGET SRC_DIR OUT_DIR [--to SCHEME] [--bits-experts N]
#                        [--bits-down N] [--down-group N]
# Every output file is derived, then OUT_DIR is compared: each safetensors file's tensor set,
# dtypes, shapes and raw bytes, its whole bytes (layout: no __metadata__, tensors sorted by dtype
# descending then name, compact header space-padded to 8), and every side file byte for byte.
# Prints one line per mismatch and a summary; exit 0 = no mismatch, 1 = mismatches, 2 = usage.
import argparse
import glob
import hashlib
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_formats import read_raw  # noqa: E402

# Rust safetensors Dtype enum order; files hold tensors by dtype DESCENDING, then name.
DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
               "U32", "F32", "F64", "I64", "U64"]
IGNORED = {"qrepack.json", "README.md"}  # generation_config.json is handled per target
GEN_CONFIG = "generation_config.json"


class UsageError(Exception):
    pass


# ---------------------------------------------------------------- safetensors & numbers
def serialize(tensors):
    """Whole-file bytes for {name: (dtype, shape, bytes)} under the layout rule."""
    names = sorted(tensors, key=lambda n: (-DTYPE_ORDER.index(tensors[n][0]), n.encode()))
    header, blobs, off = {}, [], 0
    for n in names:
        dtype, shape, data = tensors[n]
        header[n] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(bytes(data))
        off += len(data)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def to_f32(dtype, shape, raw):
    b = np.asarray(raw, dtype=np.uint8).tobytes()
    if dtype == "BF16":
        a = (np.frombuffer(b, np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif dtype == "F16":
        a = np.frombuffer(b, np.float16).astype(np.float32)
    elif dtype == "F32":
        a = np.frombuffer(b, np.float32)
    else:
        raise UsageError(f"source dtype {dtype} is not BF16/F16/F32")
    return a.reshape(shape)


def f16_bytes(a):
    """IEEE f32 -> f16, round to nearest even, overflow to inf; NaN -> sign | 0x7E00."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.ascontiguousarray(a, dtype=np.float32).astype(np.float16).view(np.uint16).copy()
    nan = np.isnan(a).reshape(-1)
    sign = (np.asarray(a, np.float32).reshape(-1).view(np.uint32) >> 31).astype(np.uint16)
    h.reshape(-1)[nan] = (sign[nan] << 15) | 0x7E00
    return h.tobytes()


def grouped(w, gs):
    """[O, I] -> [O, ng, g] with right zero padding (gs 0 = one group per row)."""
    o, i = w.shape
    if not gs:
        return w.reshape(o, 1, i)
    ng = -(-i // gs)
    wp = np.zeros((o, ng * gs), np.float32)
    wp[:, :i] = w
    return wp.reshape(o, ng, gs)


def quant_sym(w, bits, gs):
    """qwen36/olmoe: amax floored at f32(1e-12), scale = amax / qmax, q = rint(w / scale)."""
    qmax = np.float32((1 << (bits - 1)) - 1)
    g = grouped(w, gs)
    amax = np.maximum(np.abs(g).max(axis=2), np.float32(1e-12))
    scale = (amax / qmax).astype(np.float32)
    q = np.clip(np.rint(g / scale[:, :, None]), -qmax - 1, qmax).astype(np.int8)
    return q.reshape(w.shape[0], -1)[:, :w.shape[1]], scale.reshape(-1)


def pack_twos_nibbles(q):
    q = np.asarray(q, np.int8).reshape(-1)
    if q.size % 2:
        q = np.append(q, np.int8(0))
    u = q.view(np.uint8) & 0xF
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8)


def quant_qwen3(w, gs):
    """qwen3 int4: no floor, scale 0 -> 1.0, nibble = clip(q, -8, 7) + 8, odd tail = 8."""
    g = grouped(w, gs)
    scale = (np.abs(g).max(axis=2) / np.float32(7.0)).astype(np.float32)
    scale[scale == 0] = np.float32(1.0)
    q = np.clip(np.rint(g / scale[:, :, None]), -8, 7).astype(np.int32) + 8
    o, i = w.shape
    q = q.reshape(o, -1)[:, :i]
    if i % 2:
        q = np.concatenate([q, np.full((o, 1), 8, np.int32)], axis=1)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale


# ---------------------------------------------------------------- the source checkpoint
class Source:
    def __init__(self, d, use_index):
        self.dir = d
        cfg_path = os.path.join(d, "config.json")
        if not os.path.isfile(cfg_path):
            raise UsageError(f"{d}: no config.json")
        self.cfg_bytes = open(cfg_path, "rb").read()
        self.cfg = json.loads(self.cfg_bytes)
        # A Clef release's joint_head.safetensors is a side file, not a shard.
        self.shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.safetensors"))
                             if os.path.basename(p) != "joint_head.safetensors")
        if not self.shards:
            raise UsageError(f"{d}: no .safetensors shards")
        self.files = {s: read_raw(os.path.join(d, s)) for s in self.shards}
        index = os.path.join(d, "model.safetensors.index.json")
        self.where = {}  # name -> shard, first position kept, later shard wins
        if use_index and os.path.isfile(index):
            self.where = dict(json.load(open(index))["weight_map"])
        else:
            for s in self.shards:
                for n in sorted(self.files[s]):
                    self.where[n] = s

    def raw(self, name):
        return self.files[self.where[name]][name]

    def shape(self, name):
        return list(self.raw(name)[1]) if name in self.where else None

    def f32(self, name):
        return to_f32(*self.raw(name))

    def side(self, name):
        p = os.path.join(self.dir, name)
        return open(p, "rb").read() if os.path.isfile(p) else None

    def gen_config(self):
        """Copied when the source has one, else synthesized from eos_token_id (or None)."""
        own = self.side(GEN_CONFIG)
        if own is not None:
            return own
        eos = self.cfg.get("eos_token_id", (self.cfg.get("text_config") or {}).get("eos_token_id"))
        return None if eos is None else (json.dumps({"eos_token_id": eos}, indent=2) + "\n").encode()


# ---------------------------------------------------------------- qwen36
Q36_KINDS = {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
             "self_attn.k_norm.weight", "mlp.gate.weight", "mlp.shared_expert_gate.weight",
             "mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
Q36_KINDS |= {f"linear_attn.{k}" for k in ("A_log", "conv1d.weight", "dt_bias", "in_proj_a.weight",
                                           "in_proj_b.weight", "in_proj_qkv.weight",
                                           "in_proj_z.weight", "norm.weight", "out_proj.weight")}
Q36_KINDS |= {f"self_attn.{p}_proj.weight" for p in "qkvo"}
Q36_KINDS |= {f"mlp.{f}{p}_proj.weight" for f in ("", "shared_expert.") for p in ("gate", "up", "down")}
EXPERT_RE = re.compile(r"^mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
Q36_SCHEMES = {"int4-row": (4, 0), "int8-row": (8, 0), "int2-row": (2, 0), "int3-g64": (3, 64)}


def q36_scheme(a):
    m = re.fullmatch(r"int4-g(\d+)", a.to or "")
    ebits, gs = (4, int(m.group(1))) if m else Q36_SCHEMES.get(a.to or "int4-row", (None, None))
    if ebits is None or (m and gs <= 0):
        raise UsageError(f"qwen36: unknown --to {a.to}")
    ebits = ebits if a.bits_experts is None else a.bits_experts
    dbits = a.bits_down if a.bits_down not in (None, ebits) else None
    if not 2 <= ebits <= 8 or (dbits and (ebits > 4 or not 5 <= dbits <= 8)):
        raise UsageError(f"qwen36: ebits {ebits} with down bits {a.bits_down} is not a valid mix")
    return ebits, gs, dbits, (a.down_group or 0)


def q36_expert(gate, up, down, ebits, gs, dbits, dgs):
    qg, sg = quant_sym(gate, ebits, gs)
    qu, su = quant_sym(up, ebits, gs)
    if dbits:  # mixed: int4 gate|up nibbles, then int8 down bytes at its own group size
        qd, sd = quant_sym(down, dbits, dgs)
        merged = ("U8", np.concatenate([pack_twos_nibbles(np.concatenate([qg.ravel(), qu.ravel()])),
                                        qd.ravel().view(np.uint8)]))
    else:
        qd, sd = quant_sym(down, ebits, gs)
        stream = np.concatenate([qg.ravel(), qu.ravel(), qd.ravel()])
        merged = ("U8", pack_twos_nibbles(stream)) if ebits <= 4 else ("I8", stream)
    qs = np.concatenate([sg, su, sd]).astype(np.float32)
    return ((merged[0], [merged[1].size], merged[1].tobytes()), ("F32", [qs.size], qs.tobytes()))


MTP_GLOBALS = ("fc.weight", "norm.weight", "pre_fc_norm_embedding.weight",
               "pre_fc_norm_hidden.weight")
VISION_KEYS = (("depth", "depth"), ("hidden", "hidden_size"), ("heads", "num_heads"),
               ("inter", "intermediate_size"), ("patch", "patch_size"),
               ("merge", "spatial_merge_size"), ("temporal", "temporal_patch_size"),
               ("in_ch", "in_channels"), ("out_hidden", "out_hidden_size"),
               ("num_pos", "num_position_embeddings"))


def q36_block(src, kinds, base, scheme):
    """One layer (trunk or MTP): every non-expert kind F16 under `base`, each expert merged."""
    t, experts = {}, {}
    for kind, n in kinds.items():
        m = EXPERT_RE.match(kind)
        if m:
            experts.setdefault(int(m.group(1)), {})[m.group(2)] = n
        elif not kind.startswith("mlp.experts."):
            t[base + kind] = ("F16", src.shape(n), f16_bytes(src.f32(n)))
    if "mlp.experts.gate_up_proj" in kinds:  # fused [E, 2I, H]: gate rows first, then up
        gu, dn = src.f32(kinds["mlp.experts.gate_up_proj"]), src.f32(kinds["mlp.experts.down_proj"])
        inter = gu.shape[1] // 2
        slabs = [(e, (gu[e, :inter], gu[e, inter:], dn[e])) for e in range(gu.shape[0])]
    else:  # per expert; one lacking a projection is skipped
        slabs = [(e, tuple(src.f32(p[k]) for k in ("gate_proj", "up_proj", "down_proj")))
                 for e, p in sorted(experts.items()) if len(p) == 3]
    for e, (gate, up, down) in slabs:
        mw, qs = q36_expert(gate, up, down, *scheme)
        t[f"{base}mlp.experts.{e}.merged_weight"], t[f"{base}mlp.experts.{e}.qs"] = mw, qs
    return t


def derive_qwen36(src, a):
    """convert_qwen36.py @ab3caa78: trunk, MTP head, vision tower, dense and qwen3_moe rules."""
    ebits, gs, dbits, dgs = q36_scheme(a)
    cfg = src.cfg
    mcfg = dict(cfg.get("text_config", cfg))
    if "num_experts" not in mcfg and "num_local_experts" in mcfg:
        mcfg["num_experts"] = mcfg["num_local_experts"]  # appended last
    mtype = cfg.get("model_type")
    names = list(src.where)
    lm = any(n.startswith("model.language_model.layers.") for n in names)
    prefix = "model.language_model." if lm else "model."
    glob_out, layers, mtp_glob, mtp_layer, vision, unknown = {}, {}, {}, {}, {}, []
    layer_re = re.compile(re.escape(prefix) + r"layers\.(\d+)\.(.+)$")
    for n in names:
        m = layer_re.match(n)
        if n.startswith("mtp."):
            rest = n[4:]
            kind = rest[len("layers.0."):] if rest.startswith("layers.0.") else None
            if rest in MTP_GLOBALS:
                mtp_glob[n] = n
            elif kind and (kind in Q36_KINDS or EXPERT_RE.match(kind)) and \
                    not kind.startswith("linear_attn."):
                mtp_layer[kind] = n
            else:
                unknown.append(n)
        elif n.startswith(("model.visual.", "visual.")):
            vision["model.visual." + n.split("visual.", 1)[1]] = n
        elif n in ("lm_head.weight", prefix + "lm_head.weight"):
            glob_out["lm_head.weight"] = n
        elif n in (prefix + "embed_tokens.weight", prefix + "norm.weight"):
            glob_out["model." + n[len(prefix):]] = n
        elif m and (m.group(2) in Q36_KINDS or EXPERT_RE.match(m.group(2))):
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = n
        else:
            unknown.append(n)
    if unknown:
        raise UsageError(f"qwen36: {len(unknown)} source tensor(s) cannot be placed, first {unknown[0]}")
    qwen3_moe = mtype == "qwen3_moe"
    if "layer_types" in mcfg:
        layer_types = mcfg["layer_types"]
    else:
        n = mcfg.get("num_hidden_layers", max(layers, default=-1) + 1)
        layer_types = ["linear_attention" if not qwen3_moe and
                       "linear_attn.in_proj_qkv.weight" in layers.get(i, {})
                       else "full_attention" for i in range(n)]
    missing = [i for i in range(len(layer_types)) if i not in layers]
    missing += [k for k in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")
                if k not in glob_out]
    if missing:
        raise UsageError(f"qwen36: source lacks {missing}")
    scheme = (ebits, gs, dbits, dgs)
    files = {"model-globals.safetensors": {
        out: ("F16", src.shape(n), f16_bytes(src.f32(n))) for out, n in glob_out.items()}}
    vcfg = cfg.get("vision_config") or {}
    if vision and vcfg:
        files["model-vision.safetensors"] = {
            out: ("F16", src.shape(n), f16_bytes(src.f32(n))) for out, n in vision.items()}
    for i in range(len(layer_types)):
        files[f"model-{i:05d}.safetensors"] = q36_block(src, layers[i], f"model.layers.{i}.", scheme)
    if mtp_glob or mtp_layer:
        t = q36_block(src, mtp_layer, "mtp.layers.0.", scheme)
        t.update({n: ("F16", src.shape(n), f16_bytes(src.f32(n))) for n in mtp_glob})
        files["model-mtp.safetensors"] = t
    g = mcfg.get
    rp = g("rope_parameters") or {}
    experts = int(g("num_experts") or 0)
    has_shared = any("mlp.shared_expert.gate_proj.weight" in k for k in layers.values())
    if qwen3_moe:
        shared = 0
    elif not experts:
        shared = int(mcfg["intermediate_size"])
    else:
        shared = int(g("shared_expert_intermediate_size") or g("moe_intermediate_size") or 0) \
            if has_shared else 0
    meta = {"mtp_num_hidden_layers": 1 if (mtp_glob or mtp_layer) else 0,
            "model_type": mtype, "hidden": int(mcfg["hidden_size"]),
            "n_layers": int(mcfg["num_hidden_layers"]), "n_active": len(layer_types),
            "layer_types": layer_types, "num_experts": experts,
            "topk": int(g("num_experts_per_tok") or 0) if experts else 0,
            "moe_inter": int(g("moe_intermediate_size") or (g("intermediate_size") or 0) // 2)
            if experts else 0,
            "shared_inter": shared,
            "rms_eps": float(g("rms_norm_eps", 1e-6)), "ebits": ebits,
            "scoring_func": g("scoring_func", "softmax"), "n_group": int(g("n_group", 1)),
            "topk_group": int(g("topk_group", 1)), "norm_topk_prob": bool(g("norm_topk_prob", False)),
            "attn_output_gate": bool(g("attn_output_gate", False)),
            "rope_theta": float(rp.get("rope_theta", g("rope_theta", 10000000.0))),
            "mrope_section": rp.get("mrope_section", [16, 16, 16]),
            "partial_rotary_factor": float(g("partial_rotary_factor", 1.0 if qwen3_moe else 0.25))}
    if qwen3_moe:
        meta["zero_centered_norms"] = False
    if "full_attention" in layer_types:
        fa = f"{prefix}layers.{layer_types.index('full_attention')}.self_attn."
        qh, kvh = int(mcfg["num_attention_heads"]), int(mcfg["num_key_value_heads"])
        meta.update(q_heads=qh, kv_heads=kvh)
        for key, t, div, dim in (("q_head_dim", "q_proj", qh, 0), ("k_head_dim", "k_proj", kvh, 0),
                                 ("v_head_dim", "v_proj", kvh, 0), ("o_in", "o_proj", 1, 1),
                                 ("qk_rope_head_dim", "q_norm", 1, 0)):
            shape = src.shape(fa + t + ".weight")
            if shape is not None:
                meta[key] = shape[dim] // div
        meta["expert_gs"] = gs
        if dbits:
            meta.update(expert_down_bits=dbits, expert_down_gs=dgs)
        meta["head_dim"] = meta.get("k_head_dim", meta.get("q_head_dim", 256))
        meta["rope_dim"] = meta.get("qk_rope_head_dim", meta["head_dim"] // 4)
        if qwen3_moe:  # three M-RoPE sections of the rotated half, in the key's place
            h = int(meta["rope_dim"] * meta["partial_rotary_factor"]) // 2
            meta["mrope_section"] = [h - 2 * (h // 3), h // 3, h // 3]
    dn = [int(g(a, g(b, 0))) for a, b in (
        ("linear_num_value_heads", "num_value_heads"), ("linear_num_key_heads", "num_key_heads"),
        ("linear_key_head_dim", "key_head_dim"), ("linear_value_head_dim", "value_head_dim"),
        ("linear_conv_kernel_dim", "conv_kernel_size"))]
    meta.update(dn_vheads=dn[0], dn_kheads=dn[1], dn_kdim=dn[2], dn_vdim=dn[3], dn_convk=dn[4],
                dn_conv_dim=dn[1] * dn[2] * 2 + dn[0] * dn[3])
    if "model-vision.safetensors" in files:
        meta["image_token_id"] = int(cfg["image_token_id"])
        meta["vision"] = {k: int(vcfg[f]) for k, f in VISION_KEYS}
    files["config.json"] = json.dumps(mcfg, indent=1).encode()
    files["config.hf.json"] = src.cfg_bytes
    for side in ("tokenizer.json", "chat_template.jinja", "tokenizer_config.json",
                 "preprocessor_config.json", "joint_head_config.json", "joint_head.safetensors"):
        if src.side(side) is not None:
            files[side] = src.side(side)
    files["qwen36_meta.json"] = json.dumps(meta, indent=2).encode()
    return files, {}, {GEN_CONFIG: src.gen_config()}


# ---------------------------------------------------------------- qwen3
QWEN3_BIG = tuple(f"self_attn.{p}_proj.weight" for p in "qkvo") + tuple(
    f"mlp.{p}_proj.weight" for p in ("gate", "up", "down"))


def emit_qwen3_float(dtype, shape, raw):
    if dtype == "BF16":
        return ("F16", shape, f16_bytes(to_f32(dtype, shape, raw)))
    return (dtype if dtype == "F32" else "F16", shape, bytes(raw))


def derive_qwen3(src, a):
    m = re.fullmatch(r"int4-g(\d+)|(f16)", a.to or "int4-g64")
    if not m or (m.group(1) and int(m.group(1)) <= 0):
        raise UsageError(f"qwen3: unknown --to {a.to}")
    bits, gs = (0, 0) if m.group(2) else (4, int(m.group(1)))
    cfg = src.cfg
    L, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    qh = int(cfg["num_attention_heads"])
    rope = cfg.get("rope_theta")
    if rope is None:
        rope = (cfg.get("rope_parameters") or {}).get("rope_theta")
    if rope is None or "model.layers.0.self_attn.o_proj.weight" not in src.where:
        raise UsageError("qwen3: no rope_theta or no layer-0 o_proj")
    glob_t = {}
    for k in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        if k in src.where:
            glob_t[k] = emit_qwen3_float(*src.raw(k))
        elif k != "lm_head.weight":
            raise UsageError(f"qwen3: missing tensor {k}")
    files = {"model-globals.safetensors": glob_t}
    for i in range(L):
        t = {}
        for n in (n for n in src.where if n.startswith(f"model.layers.{i}.")):
            dtype, shape, raw = src.raw(n)
            if bits == 4 and n.endswith(QWEN3_BIG) and dtype in ("BF16", "F16", "F32"):
                packed, scale = quant_qwen3(to_f32(dtype, shape, raw), gs)
                t[n] = ("U8", list(packed.shape), packed.tobytes())
                t[n + ".qs"] = ("F32", list(scale.shape), scale.tobytes())
            else:
                t[n] = emit_qwen3_float(dtype, shape, raw)
        files[f"model-{i:05d}.safetensors"] = t
    meta = {"model_type": cfg.get("model_type", "qwen3"), "hidden": hidden, "n_layers": L,
            "q_heads": qh, "kv_heads": int(cfg["num_key_value_heads"]),
            "head_dim": int(cfg.get("head_dim", hidden // qh)),
            "o_in": src.shape("model.layers.0.self_attn.o_proj.weight")[1],
            "inter": int(cfg["intermediate_size"]), "vocab": int(cfg["vocab_size"]),
            "rope_theta": float(rope), "rms_eps": float(cfg.get("rms_norm_eps", 1e-6)),
            "max_position_embeddings": int(cfg.get("max_position_embeddings", 40960)),
            "bits": bits, "gs": gs}
    files["config.json"] = src.cfg_bytes
    if src.side("tokenizer.json") is not None:
        files["tokenizer.json"] = src.side("tokenizer.json")
    files["qwen3_meta.json"] = json.dumps(meta, indent=2).encode()
    return files, {}, {GEN_CONFIG: src.gen_config()}


# ---------------------------------------------------------------- olmoe
OLMOE_SIDE = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
              "merges.txt", GEN_CONFIG)
OLMOE_SKIP = re.compile(r"\.e_score_correction_bias$|^model\.rotary_emb\.")
OLMOE_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight")
FLUSH_EVERY = 512


def derive_olmoe(src, a):
    if (a.to or "int8-row") != "int8-row":
        raise UsageError(f"olmoe: unknown --to {a.to}")
    dense, experts = [], {}
    for n in src.where:
        m = OLMOE_EXPERT.match(n)
        if OLMOE_SKIP.search(n):
            continue
        if m:
            experts.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = n
        else:
            dense.append(n)
    chunks, buf = [], {}

    def flush():
        if buf:
            chunks.append(dict(buf))
            buf.clear()
    for n in dense:  # dense one at a time, then a forced flush: never shares a file with experts
        buf[n] = src.raw(n)
        if len(buf) >= FLUSH_EVERY:
            flush()
    flush()
    for (layer, e), p in sorted(experts.items()):
        if len(p) != 3:
            raise UsageError(f"olmoe: layer {layer} expert {e} lacks a projection: {sorted(p)}")
        qs = [quant_sym(src.f32(p[k]), 8, 0) for k in ("gate_proj", "up_proj", "down_proj")]
        mw = np.concatenate([q.ravel() for q, _ in qs])
        sc = np.concatenate([s for _, s in qs]).astype(np.float32)
        buf[f"model.layers.{layer}.mlp.experts.{e}.merged_weight"] = ("I8", [mw.size], mw.tobytes())
        buf[f"model.layers.{layer}.mlp.experts.{e}.qs"] = ("F32", [sc.size], sc.tobytes())
        if len(buf) >= FLUSH_EVERY:
            flush()
    flush()
    files = {f"model-{k:05d}.safetensors": c for k, c in enumerate(chunks)}
    files["config.json"] = src.cfg_bytes
    for s in OLMOE_SIDE:
        if src.side(s) is not None:
            files[s] = src.side(s)
    return files, {}, {} if GEN_CONFIG in files else {GEN_CONFIG: src.gen_config()}


# ---------------------------------------------------------------- llama
LLAMA_SIDE = ("config.json", GEN_CONFIG, "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json")


def derive_llama(src, a):
    if (a.to or "as-stored") != "as-stored":
        raise UsageError(f"llama: unknown --to {a.to}")
    cfg = src.cfg
    count = 2 + (0 if cfg.get("tie_word_embeddings", False) else 1) + 9 * int(cfg["num_hidden_layers"])
    files, whole, shas = {}, {}, {}
    for s in src.shards:  # staged unchanged: tensors and whole bytes are the source's own
        files[s] = {n: t for n, t in src.files[s].items()}
        whole[s] = open(os.path.join(src.dir, s), "rb").read()
        shas[s] = hashlib.sha256(whole[s]).hexdigest()
    for s in LLAMA_SIDE:
        if src.side(s) is not None:
            files[s] = src.side(s)
    meta = {"source": os.path.realpath(src.dir), "tensors": count, "shards": shas}
    files["llama_meta.json"] = (json.dumps(meta, indent=1) + "\n").encode()
    return files, whole, {} if GEN_CONFIG in files else {GEN_CONFIG: src.gen_config()}


# ---------------------------------------------------------------- comparison
class Report:
    def __init__(self):
        self.tensors = self.files = self.mismatches = 0

    def bad(self, file, tensor, what):
        self.mismatches += 1
        print(f"MISMATCH {file}" + (f" {tensor}" if tensor else "") + f": {what}")

    def cmp_bytes(self, file, tensor, got, want, what="bytes"):
        got, want = np.frombuffer(bytes(got), np.uint8), np.frombuffer(bytes(want), np.uint8)
        if got.size != want.size:
            self.bad(file, tensor, f"{what}: {got.size} bytes, derivation has {want.size}")
            return
        diff = np.flatnonzero(got != want)
        if diff.size:
            i = diff[0]
            self.bad(file, tensor, f"{what}: first differing byte {i} ({got[i]:#04x} vs derived "
                     f"{want[i]:#04x}), {diff.size} of {want.size} bytes differ")


def compare(out_dir, files, whole, optional, rep):
    present = set(os.listdir(out_dir))
    for name in sorted(present - set(files) - IGNORED):
        if name not in optional:
            rep.bad(name, None, "unexpected file in the output")
    for name, want in list(files.items()) + [(k, v) for k, v in optional.items() if k in present]:
        path = os.path.join(out_dir, name)
        if want is None:
            rep.bad(name, None, "written, but the source gives nothing to derive it from")
            continue
        if not os.path.isfile(path):
            rep.bad(name, None, "missing from the output")
            continue
        rep.files += 1
        got_bytes = open(path, "rb").read()
        if isinstance(want, bytes):
            rep.cmp_bytes(name, None, got_bytes, want, "file bytes")
            continue
        try:
            got = read_raw(path)
        except (ValueError, struct.error, UnicodeDecodeError) as e:
            rep.bad(name, None, f"unreadable safetensors: {e}")
            continue
        for t in sorted(set(want) - set(got)):
            rep.bad(name, t, "tensor missing")
        for t in sorted(set(got) - set(want)):
            rep.bad(name, t, "unexpected tensor")
        for t in sorted(set(want) & set(got)):
            rep.tensors += 1
            (gd, gs, gb), (wd, ws, wb) = got[t], want[t]
            if (gd, list(gs)) != (wd, list(ws)):
                rep.bad(name, t, f"{gd} {list(gs)}, derivation {wd} {list(ws)}")
            else:
                rep.cmp_bytes(name, t, gb, wb)
        rep.cmp_bytes(name, None, got_bytes, whole.get(name) or serialize(want), "whole-file bytes")


TARGETS = {"qwen36": (derive_qwen36, True), "qwen3": (derive_qwen3, False),
           "olmoe": (derive_olmoe, False), "llama": (derive_llama, False)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("target", choices=sorted(TARGETS))
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--to")
    ap.add_argument("--bits-experts", type=int)
    ap.add_argument("--bits-down", type=int)
    ap.add_argument("--down-group", type=int)
    a = ap.parse_args()
    try:
        if a.target != "qwen36" and (a.bits_experts, a.bits_down, a.down_group) != (None,) * 3:
            raise UsageError("--bits-experts/--bits-down/--down-group apply to qwen36 only")
        if a.down_group is not None and (a.down_group < 0 or not a.bits_down):
            raise UsageError("--down-group needs --bits-down and must be >= 0")
        if not os.path.isdir(a.out):
            raise UsageError(f"{a.out}: not a directory")
        derive, use_index = TARGETS[a.target]
        files, whole, optional = derive(Source(a.src, use_index), a)
    except (UsageError, KeyError, ValueError) as e:
        print(f"container_targets {a.target}: cannot derive: {e}", file=sys.stderr)
        return 2
    rep = Report()
    compare(a.out, files, whole, optional, rep)
    print(f"container_targets {a.target}: {rep.tensors} tensors checked, {rep.files} files checked, "
          f"{rep.mismatches} mismatches")
    return 0 if rep.mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
