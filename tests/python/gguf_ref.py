#!/usr/bin/env python3
"""Independent GGUF reference for qrepack's tests (numpy only, written from the GGUF spec and
ggml's block layouts, not from qrepack's C++).

  gguf_ref.py dequant FILE.gguf DUMPDIR
      DUMPDIR/<tensor>.f32 holds qrepack's decode of each tensor (raw little-endian f32);
      each must be bit-identical with this file's decode. Exit 0 when all are.
  gguf_ref.py container FILE.gguf OUTDIR [--qk-permuted] [--norm-topk-prob]
      Derives every byte of the colibri-olmoe container (config.json, tokenizer.json,
      model-NNNNN.safetensors) and compares OUTDIR's files with it.
  gguf_ref.py write OUT.gguf [--seed N] [--layers N] [--experts N] [--inter N]
      Writes an OLMoE GGUF v3 with this file's own writer (Q2_K, Q3_K, Q6_K, F16, BF16, F32).
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np

from e8_iq3 import grid_doubled  # the published IQ3_XXS grid, checked by its SHA-256

F32 = np.float32
# ggml type id -> (name, block elements, block bytes)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
         6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
         10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
         13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 18: ("IQ3_XXS", 256, 98),
         20: ("IQ4_NL", 32, 18),
         23: ("IQ4_XS", 256, 136), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
         35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}


class Reader:
    def __init__(self, path):
        self.b = Path(path).read_bytes()
        self.p = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.p:self.p + n].decode("utf-8")
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(SCALAR[t])


def read_gguf(path):
    r = Reader(path)
    assert r.b[:4] == b"GGUF"
    r.p = 4
    version, nt, nk = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version in (2, 3)
    meta = {}
    for _ in range(nk):
        k = r.string()
        meta[k] = r.value(r.take("<I"))
    tensors = []
    for _ in range(nt):
        name = r.string()
        nd = r.take("<I")
        dims = [r.take("<Q") for _ in range(nd)]
        tensors.append({"name": name, "dims": dims, "type": r.take("<I"), "offset": r.take("<Q")})
    align = meta.get("general.alignment", 32)
    start = (r.p + align - 1) // align * align
    for t in tensors:
        _, blk, bb = TYPES[t["type"]]
        n = int(np.prod(t["dims"]))
        t["numel"] = n
        t["raw"] = r.b[start + t["offset"]:start + t["offset"] + n // blk * bb]
    return meta, tensors


def half(a):
    return np.frombuffer(np.ascontiguousarray(a).tobytes(), "<f2").astype(F32)


def blocks_of(raw, bb):
    return np.frombuffer(raw, np.uint8).reshape(-1, bb)


def dq_q4_0(b):
    d = half(b[:, 0:2])[:, None]
    qs = b[:, 2:18]
    lo = ((qs & 15).astype(np.int32) - 8).astype(F32)
    hi = ((qs >> 4).astype(np.int32) - 8).astype(F32)
    return np.concatenate([lo * d, hi * d], axis=1)


def dq_q8_0(b):
    return b[:, 2:34].view(np.int8).astype(F32) * half(b[:, 0:2])[:, None]


def dq_q2_k(b):
    # 16 groups of 16: group g = 8 * half + 2 * shift_step + sub; element 128 * half +
    # 32 * shift_step + 16 * sub + l takes bits (2 * shift_step) of qs[32 * half + 16 * sub + l].
    d, m = half(b[:, 80:82]), half(b[:, 82:84])
    out = np.empty((b.shape[0], 256), F32)
    for g in range(16):
        hf, st, sub = g // 8, (g % 8) // 2, g % 2
        sc = b[:, g]
        dl = (d * (sc & 15).astype(F32))[:, None]
        ml = (m * (sc >> 4).astype(F32))[:, None]
        q = ((b[:, 16 + 32 * hf + 16 * sub:16 + 32 * hf + 16 * sub + 16] >> (2 * st)) & 3)
        e = 128 * hf + 32 * st + 16 * sub
        out[:, e:e + 16] = dl * q.astype(F32) - ml
    return out


def q3_scales(s):
    # Scale j (0..15): low 4 bits from byte j % 8 (low nibble for j < 8, high for j >= 8),
    # high 2 bits from byte 8 + j % 4, bits 2 * (j // 4).
    out = np.empty((s.shape[0], 16), np.int32)
    for j in range(16):
        low = (s[:, j % 8] >> (4 * (j // 8))) & 15
        high = (s[:, 8 + j % 4] >> (2 * (j // 4))) & 3
        out[:, j] = (low | (high << 4)).astype(np.int32) - 32
    return out


def dq_q3_k(b):
    hm, qs, d = b[:, 0:32], b[:, 32:96], half(b[:, 108:110])
    sc = q3_scales(b[:, 96:108])
    out = np.empty((b.shape[0], 256), F32)
    for g in range(16):
        hf, st, sub = g // 8, (g % 8) // 2, g % 2
        low = (qs[:, 32 * hf + 16 * sub:32 * hf + 16 * sub + 16] >> (2 * st)) & 3
        bit = (hm[:, 16 * sub:16 * sub + 16] >> (4 * hf + st)) & 1
        q = low.astype(np.int32) - np.where(bit == 1, 0, 4)
        e = 128 * hf + 32 * st + 16 * sub
        out[:, e:e + 16] = (d * sc[:, g].astype(F32))[:, None] * q.astype(F32)
    return out


def dq_q6_k(b):
    ql, qh, sc, d = b[:, 0:128], b[:, 128:192], b[:, 192:208].view(np.int8), half(b[:, 208:210])
    out = np.empty((b.shape[0], 256), F32)
    for e in range(256):
        hf, r = e // 128, e % 128
        quarter, l = r // 32, r % 32
        lowbyte = ql[:, 64 * hf + l + 32 * (quarter % 2)]
        low = (lowbyte >> (4 * (quarter // 2))) & 15
        high = (qh[:, 32 * hf + l] >> (2 * quarter)) & 3
        q = (low | (high << 4)).astype(np.int32) - 32
        s = sc[:, 8 * hf + l // 16 + 2 * quarter].astype(F32)
        out[:, e] = (d * s) * q.astype(F32)
    return out


def nibbles(qs):
    # 16 bytes -> 32 codes: element j < 16 is the low nibble of byte j, element 16 + j its high.
    return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)


def fifth_bits(qh):
    # u32 little-endian per block; element e (0..31) takes bit e.
    word = qh.astype(np.uint32)
    word = word[:, 0] | (word[:, 1] << 8) | (word[:, 2] << 16) | (word[:, 3] << 24)
    return ((word[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)


def dq_q4_1(b):
    d, m = half(b[:, 0:2])[:, None], half(b[:, 2:4])[:, None]
    return nibbles(b[:, 4:20]).astype(F32) * d + m


def dq_q5_0(b):
    q = nibbles(b[:, 6:22]) + 16 * fifth_bits(b[:, 2:6]) - 16
    return q.astype(F32) * half(b[:, 0:2])[:, None]


def dq_q5_1(b):
    d, m = half(b[:, 0:2])[:, None], half(b[:, 2:4])[:, None]
    q = nibbles(b[:, 8:24]) + 16 * fifth_bits(b[:, 4:8])
    return q.astype(F32) * d + m


def k4_scales(s):
    # Eight 6-bit (scale, min) pairs in 12 bytes. Pairs 0-3: scale = s[j] & 63, min =
    # s[j + 4] & 63. Pairs 4-7: low 4 bits from s[j + 4] (scale: low nibble, min: high), high
    # 2 bits from the top of s[j - 4] (scale) and s[j] (min).
    sc, mn = np.empty((s.shape[0], 8), np.int32), np.empty((s.shape[0], 8), np.int32)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def dq_k(b, qs, qh):
    # Q4_K / Q5_K: element e is in sub-block g = e // 32 (scale and min g), pair p = g // 2;
    # its code is nibble (g % 2) of qs[32 p + e % 32], plus 16 when bit g of qh[e % 32] is set.
    d, dmin = half(b[:, 0:2]), half(b[:, 2:4])
    sc, mn = k4_scales(b[:, 4:16])
    out = np.empty((b.shape[0], 256), F32)
    for e in range(256):
        g, l = e // 32, e % 32
        q = ((qs[:, 32 * (g // 2) + l] >> (4 * (g % 2))) & 15).astype(np.int32)
        if qh is not None:
            q = q + 16 * ((qh[:, l] >> g) & 1).astype(np.int32)
        out[:, e] = (d * sc[:, g].astype(F32)) * q.astype(F32) - dmin * mn[:, g].astype(F32)
    return out


def dq_q4_k(b):
    return dq_k(b, b[:, 16:144], None)


def dq_q5_k(b):
    return dq_k(b, b[:, 48:176], b[:, 16:48])


IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                 np.int32)


def dq_iq4_nl(b):
    return half(b[:, 0:2])[:, None] * IQ4NL[nibbles(b[:, 2:18])].astype(F32)


def dq_iq4_xs(b):
    # Sub-block k (0..7) of 32: 6-bit scale = nibble k % 2 of scales_l[k // 2] | bits 2k, 2k + 1
    # of the u16 scales_h as bits 4-5; value = (d * (scale - 32)) * level.
    d = half(b[:, 0:2])
    sh = b[:, 2].astype(np.int32) | (b[:, 3].astype(np.int32) << 8)
    out = np.empty((b.shape[0], 256), F32)
    for k in range(8):
        ls = ((b[:, 4 + k // 2] >> (4 * (k % 2))) & 15).astype(np.int32) | (((sh >> (2 * k)) & 3) << 4)
        dl = (d * (ls - 32).astype(F32))[:, None]
        out[:, 32 * k:32 * k + 32] = dl * IQ4NL[nibbles(b[:, 8 + 16 * k:24 + 16 * k])].astype(F32)
    return out


# E2M1 codes 0-15; code 8 (-0 in the OCP spec) is +0 in ggml's table, whose values are ints.
MXFP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], F32)


def dq_mxfp4(b):
    # E2M1 value * 2^(e - 127), written as (2 * value) * 2^(e - 128): both factors exact.
    with np.errstate(over="ignore"):
        scale = np.ldexp(F32(1), b[:, 0].astype(np.int32) - 128).astype(F32)[:, None]
        return (F32(2) * MXFP4[nibbles(b[:, 1:17])]) * scale


def top_trit(codes, n):
    """The n-th base-3 digit of each byte, most significant first, as ggml's TQ1_0 packs them:
    (byte * 3^n mod 256) keeps it at the top, and (x * 3) >> 8 reads it; minus 1."""
    x = (codes.astype(np.uint32) * (3 ** n)) & 0xFF
    return ((x * 3) >> 8).astype(np.int32) - 1


def dq_tq1_0(b):
    # qs[48]: bytes 0-31 hold five digits each (digit n of byte m is element 32n + m), then
    # bytes 32-47 five each (16 per digit); qh[4]: four digits each; d.
    d = half(b[:, 52:54])[:, None]
    parts = [top_trit(b[:, 0:32], n) for n in range(5)]
    parts += [top_trit(b[:, 32:48], n) for n in range(5)]
    parts += [top_trit(b[:, 48:52], n) for n in range(4)]
    return np.concatenate(parts, axis=1).astype(F32) * d


def dq_tq2_0(b):
    # qs[64]: in each 32-byte half, bits 2l..2l+1 of byte m are element 32l + m; d.
    d = half(b[:, 64:66])[:, None]
    parts = [((b[:, j:j + 32] >> (2 * l)) & 3).astype(np.int32) - 1
             for j in (0, 32) for l in range(4)]
    return np.concatenate(parts, axis=1).astype(F32) * d


def dq_iq3_xxs(b):
    # d, qs[64] (a grid index per four elements), then eight u32 words, one per 32 elements:
    # bits 7l..7l+6 the signs of elements 8l..8l+7 (the eighth: parity of the seven), bits
    # 28-31 the scale s; x = (db * grid) * sign, db = (d * (0.5 + s)) * 0.5.
    n = b.shape[0]
    d = half(b[:, 0:2])[:, None]
    aux = np.ascontiguousarray(b[:, 66:98]).view("<u4").astype(np.uint32)  # [n, 8]
    db = (d * (F32(0.5) + (aux >> 28).astype(F32))) * F32(0.5)
    mag = grid_doubled()[b[:, 2:66]].reshape(n, 256).astype(F32)
    seven = (aux[:, :, None] >> (7 * np.arange(4, dtype=np.uint32))) & 127  # [n, 8, 4]
    parity = np.zeros_like(seven)
    for k in range(7):
        parity ^= (seven >> k) & 1
    signs = seven | (parity << 7)
    bits = (signs[..., None] >> np.arange(8, dtype=np.uint32)) & 1  # [n, 8, 4, 8]
    sign = np.where(bits == 1, F32(-1), F32(1)).reshape(n, 256)
    return (np.repeat(db, 32, axis=1) * mag) * sign


def dequant(t):
    raw, ty = t["raw"], t["type"]
    if ty == 0:
        return np.frombuffer(raw, "<f4").astype(F32)
    if ty == 1:
        return np.frombuffer(raw, "<f2").astype(F32)
    if ty == 30:
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(F32)
    fn = {2: dq_q4_0, 3: dq_q4_1, 6: dq_q5_0, 7: dq_q5_1, 8: dq_q8_0, 10: dq_q2_k,
          11: dq_q3_k, 12: dq_q4_k, 13: dq_q5_k, 14: dq_q6_k, 18: dq_iq3_xxs, 20: dq_iq4_nl,
          23: dq_iq4_xs,
          34: dq_tq1_0, 35: dq_tq2_0, 39: dq_mxfp4}[ty]
    return fn(blocks_of(raw, TYPES[ty][2])).reshape(-1)


def cmd_dequant(gguf, dump):
    _, tensors = read_gguf(gguf)
    bad = 0
    for t in tensors:
        want = dequant(t).view(np.uint32)
        got = np.fromfile(Path(dump) / (t["name"] + ".f32"), "<u4")
        if got.shape != want.shape or not np.array_equal(got, want):
            diff = np.flatnonzero(got != want) if got.shape == want.shape else []
            print("MISMATCH %s (%s): %s" % (t["name"], TYPES[t["type"]][0],
                                             "shape" if not len(diff) else diff[:5]))
            bad += 1
    print("%d tensors, %d mismatches" % (len(tensors), bad))
    return 1 if bad else 0


# ---- the container -------------------------------------------------------------------------

LAYER = {"attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
         "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
         "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
         "attn_q_norm": "self_attn.q_norm.weight", "attn_k_norm": "self_attn.k_norm.weight",
         "ffn_gate_inp": "mlp.gate.weight"}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
          "output_norm.weight": "model.norm.weight"}
ST_NAME = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int8): "I8"}
ST_RANK = {"F32": 0, "F16": 1, "I8": 2}


def hf_name(name):
    if name in GLOBAL:
        return GLOBAL[name]
    parts = name.split(".")
    return "model.layers.%s.%s" % (parts[1], LAYER[parts[2]])


def unpermute(w, heads):
    # llama.cpp's row (h, i, a) of (heads, m, 2) holds HF row (h, a, i) of (heads, 2, m).
    m = w.shape[0] // heads // 2
    return w.reshape(heads, m, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def int8_rows(w):
    amax = np.abs(w).max(axis=1)
    scale = (np.maximum(amax, F32(1e-12)) / F32(127)).astype(F32)
    q = np.clip(np.rint(w / scale[:, None]), -128, 127).astype(np.int8)
    return q, scale


def safetensors_bytes(items):
    items = sorted(items, key=lambda kv: (ST_RANK[ST_NAME[kv[1].dtype]], kv[0]))
    header, off, data = {}, 0, []
    for name, a in items:
        b = a.tobytes()
        header[name] = {"dtype": ST_NAME[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        data.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(data)


def expected_tensors(meta, tensors, qk_permuted):
    heads = meta["olmoe.attention.head_count"]
    out = []
    experts = {}
    for t in tensors:
        parts = t["name"].split(".")
        if len(parts) == 4 and parts[2].endswith("_exps"):
            experts.setdefault(int(parts[1]), {})[parts[2]] = t
            continue
        w = dequant(t).reshape(tuple(reversed(t["dims"])))
        if qk_permuted and parts[-2] in ("attn_q", "attn_k"):
            w = unpermute(w, heads)
        out.append([(hf_name(t["name"]), w.astype(F32 if w.ndim == 1 else np.float16))])
    for layer in sorted(experts):
        mats = {}
        for kind in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            t = experts[layer][kind]
            cols, rows, n = t["dims"]
            mats[kind] = dequant(t).reshape(n, rows, cols)
        for e in range(mats["ffn_gate_exps"].shape[0]):
            qs, ss = zip(*(int8_rows(mats[k][e]) for k in
                           ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")))
            p = "model.layers.%d.mlp.experts.%d." % (layer, e)
            out.append([(p + "merged_weight", np.concatenate([q.reshape(-1) for q in qs])),
                        (p + "qs", np.concatenate(ss).astype(F32))])
    return out


def shard(groups, every=512):
    files, cur = [], []
    for g in groups:
        cur.extend(g)
        if len(cur) >= every:
            files.append(cur)
            cur = []
    if cur:
        files.append(cur)
    return files


def config_of(meta, norm_topk):
    keys = [("olmoe.embedding_length", "hidden_size"), ("olmoe.block_count", "num_hidden_layers"),
            ("olmoe.attention.head_count", "num_attention_heads"),
            ("olmoe.attention.head_count_kv", "num_key_value_heads"),
            ("olmoe.expert_count", "num_experts"), ("olmoe.expert_used_count", "num_experts_per_tok"),
            ("olmoe.feed_forward_length", "intermediate_size"), ("olmoe.rope.freq_base", "rope_theta"),
            ("olmoe.attention.layer_norm_rms_epsilon", "rms_norm_eps")]
    c = {hf: meta[g] for g, hf in keys}
    c.update(vocab_size=len(meta["tokenizer.ggml.tokens"]), norm_topk_prob=norm_topk,
             model_type="olmoe", architectures=["OlmoeForCausalLM"])
    return c


def tokenizer_of(meta):
    toks = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or []
    vocab, added = {}, []
    for i, s in enumerate(toks):
        vocab[s] = i
        ty = types[i] if i < len(types) else 1
        if ty in (3, 4):
            added.append({"id": i, "content": s, "special": ty == 3})
    model = {"type": "BPE", "vocab": vocab}
    if meta.get("tokenizer.ggml.merges"):
        model["merges"] = list(meta["tokenizer.ggml.merges"])
    tok = {"add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token")),
           "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token")), "model": model,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
           "added_tokens": added}
    for g, hf in (("bos_token_id", "bos_token"), ("eos_token_id", "eos_token"),
                  ("padding_token_id", "pad_token")):
        v = meta.get("tokenizer.ggml." + g)
        if v is not None and v < len(toks):
            tok[hf] = toks[v]
    if "tokenizer.chat_template" in meta:
        tok["chat_template"] = meta["tokenizer.chat_template"]
    return tok


def dumps(x):
    return (json.dumps(x, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def cmd_container(gguf, outdir, qk_permuted, norm_topk):
    meta, tensors = read_gguf(gguf)
    want = {"config.json": dumps(config_of(meta, norm_topk)),
            "tokenizer.json": dumps(tokenizer_of(meta))}
    for i, items in enumerate(shard(expected_tensors(meta, tensors, qk_permuted))):
        want["model-%05d.safetensors" % i] = safetensors_bytes(items)
    out = Path(outdir)
    got = sorted(p.name for p in out.iterdir() if p.name != "qrepack.json")
    bad = 0
    if got != sorted(want):
        print("FILES differ: got %s, want %s" % (got, sorted(want)))
        bad += 1
    for name, b in want.items():
        have = (out / name).read_bytes() if (out / name).exists() else b""
        if have != b:
            first = next((i for i, (x, y) in enumerate(zip(have, b)) if x != y), min(len(have), len(b)))
            print("MISMATCH %s (%d vs %d bytes, first difference at %d)" % (name, len(have), len(b), first))
            bad += 1
    print("%d files compared, %d differ" % (len(want), bad))
    return 1 if bad else 0


# ---- an independent writer (second source for the upstream comparison) ----------------------

def w_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def w_val(v):
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + w_str(v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, int):
        return struct.pack("<II", 4, v)
    if isinstance(v, list) and isinstance(v[0], str):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(w_str(x) for x in v)
    return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)


def encode(ty, x, rng):
    if ty == 0:
        return x.astype("<f4").tobytes()
    if ty == 1:
        return x.astype("<f2").tobytes()
    if ty == 30:
        return (x.astype(F32).view(np.uint32) >> 16).astype("<u2").tobytes()
    nb = x.size // 256
    body = {10: 80, 11: 108, 14: 208}[ty]
    blocks = rng.integers(0, 256, size=(nb, body), dtype=np.uint8)
    if ty == 14:  # int8 scales in [-40, 40]
        blocks[:, 192:208] = rng.integers(-40, 41, size=(nb, 16)).astype(np.int8).view(np.uint8)
    nd = 2 if ty == 10 else 1
    d = (rng.uniform(0.0005, 0.004, size=(nb, nd))).astype("<f2").view(np.uint8)
    return np.concatenate([blocks, d.reshape(nb, 2 * nd)], axis=1).tobytes()


def cmd_write(out, seed, layers=2, experts=4, inter=512):
    rng = np.random.default_rng(seed)
    H, L, E, I, V, A = 256, layers, experts, inter, 64, 32
    toks = ["<|endoftext|>", "<|padding|>"] + ["t%d\u00e9" % i for i in range(V - 2)]
    meta = {"general.architecture": "olmoe", "general.name": "independent", "olmoe.block_count": L,
            "olmoe.context_length": 4096, "olmoe.embedding_length": H,
            "olmoe.feed_forward_length": I, "olmoe.attention.head_count": 8,
            "olmoe.attention.head_count_kv": 8, "olmoe.rope.freq_base": 10000.0,
            "olmoe.attention.layer_norm_rms_epsilon": 1e-5, "olmoe.expert_used_count": 2,
            "olmoe.expert_count": E, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": toks,
            "tokenizer.ggml.token_type": [3, 3] + [1] * (V - 2),
            "tokenizer.ggml.merges": ["t 1", "t 2"], "tokenizer.ggml.bos_token_id": 0,
            "tokenizer.ggml.eos_token_id": 0, "tokenizer.ggml.padding_token_id": 1}
    ts = [("token_embd.weight", [H, V], 14)]
    for l in range(L):
        p = "blk.%d." % l
        ts += [(p + "attn_norm.weight", [H], 0), (p + "attn_q.weight", [H, H], 10 + l % 2),
               (p + "attn_k.weight", [H, H], 14), (p + "attn_v.weight", [H, H], 1),
               (p + "attn_output.weight", [H, H], 30), (p + "attn_q_norm.weight", [H], 1),
               (p + "attn_k_norm.weight", [H], 30), (p + "ffn_norm.weight", [H], 0),
               (p + "ffn_gate_inp.weight", [H, E], 0),
               (p + "ffn_gate_exps.weight", [H, I, E], 11 - l % 2),
               (p + "ffn_up_exps.weight", [H, I, E], 10 + l % 2),
               (p + "ffn_down_exps.weight", [I, H, E], 14)]
    ts += [("output_norm.weight", [H], 0), ("output.weight", [H, V], 1)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta))
    head += b"".join(w_str(k) + w_val(v) for k, v in meta.items())
    datas, off = [], 0
    for name, dims, ty in ts:
        x = rng.normal(1.0 if len(dims) == 1 else 0.0, 0.02, size=int(np.prod(dims))).astype(F32)
        b = encode(ty, x, rng)
        head += w_str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", ty, off)
        b += b"\0" * ((A - len(b) % A) % A)
        datas.append(b)
        off += len(b)
    head += b"\0" * ((A - len(head) % A) % A)
    Path(out).write_bytes(head + b"".join(datas))
    return 0


def main(argv):
    if argv[0] == "dequant":
        return cmd_dequant(argv[1], argv[2])
    if argv[0] == "container":
        return cmd_container(argv[1], argv[2], "--qk-permuted" in argv, "--norm-topk-prob" in argv)
    if argv[0] == "write":
        opt = lambda k, d: int(argv[argv.index(k) + 1]) if k in argv else d
        return cmd_write(argv[1], opt("--seed", 7), opt("--layers", 2), opt("--experts", 4),
                         opt("--inter", 512))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
