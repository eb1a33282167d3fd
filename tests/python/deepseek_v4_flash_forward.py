#!/usr/bin/python3
"""An independent numpy implementation of DeepSeek V4 Flash as its runtime c/deepseek_v4.c
computes it (mateocabanal/colibri @ 5dd1ebb7: block_token_impl, attention_token_impl,
coli_v4_compressor_step, coli_v4_indexer_step, coli_v4_sparse_attention_ref, moe_token,
coli_v4_route, the expert forwards, final_hidden), written from that source: its own
safetensors reader and e4m3 / e2m1 / UE8M0 / bf16 decoders, token by token, in f32 with the
runtime's e4m3 activation quantization before every FP8 / FP4 product and its bf16 rounding.
Dot products in the fixed order qrepack documents (8 lanes, docs/model.md): with rounding to
bf16 / e4m3 at every step, another order flips roundings and the logits part by percents.

  deepseek_v4_flash_forward.py --expand SRC DST   (FP8 / FP4 weights stored as BF16)
  deepseek_v4_flash_forward.py CKPT FULL_IDS PROMPT_LEN LOGITS.npy
compares qrepack's logits (every position of FULL_IDS) within 1e-5 of the largest, the argmax
at every position, and the greedy continuation (the argmax chain from the prompt's last row).
"""
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

F = np.float32


def bf(x):
    a = np.ascontiguousarray(np.asarray(x, dtype=F))
    b = a.view(np.uint32).astype(np.uint64)
    tie = (b >> 16) & 1
    r = ((b + 0x7FFF + tie) & 0xFFFF0000).astype(np.uint32)
    fin = (b & 0x7F800000) != 0x7F800000
    out = np.where(fin, r, (b & 0xFFFF0000).astype(np.uint32)).astype(np.uint32)
    return out.view(F).reshape(a.shape)


def dot8(W, x):
    """Rows of W times x in qrepack's fixed order (forward_ops.cc dot, also the runtime's
    scalar order up to lanes): 8 lane accumulators over the first multiple of 8 columns,
    combined ((0+4)+(1+5))+((2+6)+(3+7)), plus the tail summed in order; f32 throughout."""
    W = np.atleast_2d(np.asarray(W, F))
    x = np.asarray(x, F)
    n = x.shape[0]
    full = n // 8 * 8
    acc = np.zeros((W.shape[0], 8), F)
    for i in range(0, full, 8):
        acc += W[:, i:i + 8] * x[i:i + 8]
    tail = np.zeros(W.shape[0], F)
    for i in range(full, n):
        tail += W[:, i] * x[i]
    return (((acc[:, 0] + acc[:, 4]) + (acc[:, 1] + acc[:, 5]))
            + ((acc[:, 2] + acc[:, 6]) + (acc[:, 3] + acc[:, 7])) + tail).astype(F)


def sigmoid(z):
    """sigmoidf_stable: 1 / (1 + e^-z) for z >= 0, e^z / (1 + e^z) below."""
    z = np.asarray(z, F)
    e = np.exp(-np.abs(z)).astype(F)
    return np.where(z >= 0, F(1) / (F(1) + e), e / (F(1) + e)).astype(F)


def seqsum(v):
    return F(np.cumsum(np.asarray(v, F).ravel(), dtype=F)[-1])


def read_st_file(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    t = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        t[k] = (v["dtype"], v["shape"], raw[8 + n + a:8 + n + b])
    return t


def read_st(d):
    t = {}
    for f in sorted(f for f in os.listdir(d) if f.endswith(".safetensors")):
        t.update(read_st_file(os.path.join(d, f)))
    return t


def e4m3_table():
    out = np.zeros(256, F)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        v = math.ldexp(m, -9) if e == 0 else math.ldexp(1 + m / 8, e - 7)
        if e == 15 and m == 7:
            v = float("nan")
        out[c] = -v if s else v
    return out


E4M3 = e4m3_table()
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6], F)


def tensor(t, name):
    dt, shape, b = t[name]
    if dt == "F32":
        return np.frombuffer(b, F).reshape(shape)
    if dt == "BF16":
        return (np.frombuffer(b, np.uint16).astype(np.uint32) << 16).view(F).reshape(shape)
    if dt == "I64":
        return np.frombuffer(b, np.int64).reshape(shape)
    raise ValueError(name + " " + dt)


def e8m0(b):
    return np.ldexp(F(1), np.frombuffer(b, np.uint8).astype(np.int32) - 127).astype(F)


def fp8_weight(t, stem):
    if stem + ".scale" not in t:  # stored decoded (--expand)
        return tensor(t, stem + ".weight")
    dt, shape, b = t[stem + ".weight"]
    w = E4M3[np.frombuffer(b, np.uint8)].reshape(shape)
    _, sshape, sb = t[stem + ".scale"]
    s = e8m0(sb).reshape(sshape)
    full = np.repeat(np.repeat(s, 128, 0), 128, 1)[:shape[0], :shape[1]]
    return (w * full).astype(F)


def fp4_weight(t, stem):
    if stem + ".scale" not in t:
        return tensor(t, stem + ".weight")
    _, shape, b = t[stem + ".weight"]
    p = np.frombuffer(b, np.uint8).reshape(shape)
    codes = np.stack([p & 15, p >> 4], -1).reshape(shape[0], shape[1] * 2)
    _, sshape, sb = t[stem + ".scale"]
    s = np.repeat(e8m0(sb).reshape(sshape), 32, 1)
    return (E2M1[codes] * s).astype(F)


def ceil_log2(v):
    m, e = math.frexp(float(v))
    return e - 1 if m == 0.5 else e


def e4m3_rne(v):
    """e4m3fn round-to-nearest-even of |v| < 448 (448 and above saturate), sign kept."""
    v = np.asarray(v, F)
    m = np.abs(v).astype(np.float64)
    _, ex = np.frexp(np.where(m > 0, m, 1.0))
    step = np.where(m < 0.015625, 2.0 ** -9, np.ldexp(1.0, ex - 4))
    r = np.minimum(np.rint(m / step) * step, 448.0)
    return (np.sign(v) * r).astype(F)


def qdq_fp8(x, block):
    x = np.asarray(x, F).copy()
    for b0 in range(0, len(x), block):
        blk = x[b0:b0 + block]
        mx = max(float(np.max(np.abs(blk))), float(F(1e-4)))
        e = min(127, max(-127, ceil_log2(F(mx) / F(448))))
        sc = F(math.ldexp(1, e))
        v = np.clip(blk / sc, -448, 448).astype(F)
        x[b0:b0 + block] = e4m3_rne(v) * sc
    return x


def qdq_fp4(x, block):
    x = np.asarray(x, F).copy()
    for b0 in range(0, len(x), block):
        blk = x[b0:b0 + block]
        mx = max(float(np.max(np.abs(blk))), 6.0 * math.ldexp(1, -126))
        e = min(127, max(-127, ceil_log2(F(mx) / F(6))))
        sc = F(math.ldexp(1, e))
        v = np.clip(blk / sc, -6, 6).astype(F)
        d = np.abs(v[:, None] - E2M1[None, :])
        x[b0:b0 + block] = E2M1[np.argmin(d, 1)] * sc
    return x


def hadamard(x):
    x = np.asarray(x, F).copy()
    n, w = len(x), 1
    while w < n:
        for b0 in range(0, n, 2 * w):
            l, r = x[b0:b0 + w].copy(), x[b0 + w:b0 + 2 * w].copy()
            x[b0:b0 + w], x[b0 + w:b0 + 2 * w] = l + r, l - r
        w *= 2
    return bf(x * F(1 / math.sqrt(n)))


def rms(x, w, eps):
    x = np.asarray(x, F)
    inv = F(1) / np.sqrt(seqsum(x * x) / F(len(x)) + F(eps))
    return (x * inv * w).astype(F)


class Cfg:
    def __init__(self, c):
        self.__dict__.update(c)
        rs = c["rope_scaling"]
        self.orig = rs["original_max_position_embeddings"]
        self.factor, self.bf, self.bs = rs["factor"], rs["beta_fast"], rs["beta_slow"]


def rope_cs(c, pos, compressed):
    dim = c.qk_rope_head_dim
    orig = c.orig if compressed else 0
    base = F(c.compress_rope_theta if compressed else c.rope_theta)
    lo, hi = 0, -1
    if orig > 0:
        den = F(2) * F(math.log(base))
        lv = F(dim) * F(math.log(F(orig) / (F(c.bf) * F(6.2831853071795864769)))) / den
        hv = F(dim) * F(math.log(F(orig) / (F(c.bs) * F(6.2831853071795864769)))) / den
        lo, hi = max(0, math.floor(lv)), min(dim - 1, math.ceil(hv))
    cs, sn = [], []
    for p in range(dim // 2):
        f = F(1) / F(base ** (F(2 * p) / F(dim)))
        if orig > 0:
            width = F(0.001) if hi == lo else F(hi - lo)
            ramp = min(max(F(p - lo) / width, F(0)), F(1))
            sm = F(1) - ramp
            f = f / F(c.factor) * (F(1) - sm) + f * sm
        a = F(pos) * F(f)
        cs.append(math.cos(a))
        sn.append(math.sin(a))
    return np.array(cs, F), np.array(sn, F)


def rot(x, cs, sn, inv=False):
    x = np.asarray(x, F).copy()
    s = -sn if inv else sn
    re, im = x[0::2].copy(), x[1::2].copy()
    x[0::2] = re * cs - im * s
    x[1::2] = re * s + im * cs
    return x


class Compressor:
    def __init__(self, t, p, c, ratio, dim, fp4):
        self.c, self.r, self.d, self.fp4 = c, ratio, dim, fp4
        coff = 2 if ratio == 4 else 1
        self.wkv, self.wg = tensor(t, p + ".wkv.weight"), tensor(t, p + ".wgate.weight")
        self.ape, self.norm = tensor(t, p + ".ape"), tensor(t, p + ".norm.weight")
        rows = 2 * ratio if ratio == 4 else ratio
        self.kv = np.zeros((rows, coff * dim), F)
        self.sc = np.full((rows, coff * dim), -np.inf, F)

    def step(self, x, pos):
        r, d = self.r, self.d
        slot = pos % r
        row = r + slot if r == 4 else slot
        self.kv[row] = dot8(self.wkv, x)
        self.sc[row] = dot8(self.wg, x) + self.ape[slot]
        if (pos + 1) % r:
            return None
        if r == 4:
            kv = np.concatenate([self.kv[:4, :d], self.kv[4:, d:]])
            sc = np.concatenate([self.sc[:4, :d], self.sc[4:, d:]])
        else:
            kv, sc = self.kv, self.sc
        m = sc.max(0)
        tot, mixed = np.zeros(d, F), np.zeros(d, F)
        for k in range(len(sc)):
            e = np.exp(sc[k] - m).astype(F)
            tot += e
            mixed += kv[k] * e
        out = (mixed / tot).astype(F)
        if r == 4:
            self.kv[:4], self.sc[:4] = self.kv[4:].copy(), self.sc[4:].copy()
        out = bf(out)
        out = bf(rms(out, self.norm, self.c.rms_norm_eps))
        rd = self.c.qk_rope_head_dim
        cs, sn = rope_cs(self.c, pos + 1 - r, True)
        out[d - rd:] = bf(rot(out[d - rd:], cs, sn))
        if self.fp4:
            out = qdq_fp4(hadamard(out), 32)
            return bf(out)
        out[:d - rd] = bf(qdq_fp8(out[:d - rd], 64))
        return out


class Layer:
    def __init__(self, t, c, l):
        p = f"layers.{l}."
        self.c, self.l, self.p = c, l, p
        g = lambda n: tensor(t, p + n)
        self.hc = {s: (g(f"hc_{s}_fn"), g(f"hc_{s}_scale"), g(f"hc_{s}_base")) for s in ("attn", "ffn")}
        self.attn_norm, self.ffn_norm = g("attn_norm.weight"), g("ffn_norm.weight")
        self.w = {n: fp8_weight(t, p + "attn." + n) for n in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b")}
        self.q_norm, self.kv_norm, self.sink = g("attn.q_norm.weight"), g("attn.kv_norm.weight"), g("attn.attn_sink")
        self.ratio = c.compress_ratios[l]
        self.comp = Compressor(t, p + "attn.compressor", c, self.ratio, c.head_dim, False) if self.ratio else None
        self.ix = None
        if self.ratio == 4:
            self.ix = Compressor(t, p + "attn.indexer.compressor", c, 4, c.index_head_dim, True)
            self.ix_wq = fp8_weight(t, p + "attn.indexer.wq_b")
            self.ix_wp = g("attn.indexer.weights_proj.weight")
            self.ix_keys = []
        self.compressed, self.window = [], []
        self.gate = g("ffn.gate.weight")
        self.hash = l < c.num_hash_layers
        self.tid = g("ffn.gate.tid2eid") if self.hash else None
        self.bias = None if self.hash else g("ffn.gate.bias")
        self.experts = [{k: fp4_weight(t, f"{p}ffn.experts.{e}.{k}") for k in ("w1", "w2", "w3")}
                        for e in range(c.n_routed_experts)]
        self.shared = {k: fp8_weight(t, f"{p}ffn.shared_experts.{k}") for k in ("w1", "w2", "w3")}

    def mv8(self, w, x):
        return dot8(w, qdq_fp8(x, 128))

    def indexer(self, qa, x, pos):
        k = self.ix.step(x, pos)
        if k is not None:
            self.ix_keys.append(k)
        if not self.ix_keys:
            return []
        c, d, H = self.c, self.c.index_head_dim, self.c.index_n_heads
        q = bf(self.mv8(self.ix_wq, qa)).reshape(H, d)
        cs, sn = rope_cs(c, pos, True)
        rd = c.qk_rope_head_dim
        for h in range(H):
            q[h, d - rd:] = bf(rot(q[h, d - rd:], cs, sn))
            q[h] = bf(qdq_fp4(hadamard(q[h]), 32))
        hw = dot8(self.ix_wp, x) * (F(1) / np.sqrt(F(d * H)))
        scores = []
        for j, key in enumerate(self.ix_keys):
            s = F(0)
            for h in range(H):
                s += max(dot8(q[h], key)[0], F(0)) * hw[h]
            scores.append((-s, j))
        scores.sort()
        return [j for _, j in scores[:min(len(scores), c.index_topk)]]

    def attention(self, x, pos):
        c = self.c
        nh, hd, rd = c.num_attention_heads, c.head_dim, c.qk_rope_head_dim
        qa = bf(self.mv8(self.w["wq_a"], x))
        qa = bf(rms(qa, self.q_norm, c.rms_norm_eps))
        sel = None
        if self.ratio:
            out = self.comp.step(x, pos)
            if out is not None:
                self.compressed.append(out)
            if self.ix is not None:
                sel = self.indexer(qa, x, pos)
        q = bf(self.mv8(self.w["wq_b"], qa)).reshape(nh, hd)
        for h in range(nh):
            ms = seqsum(q[h] * q[h])
            q[h] = bf(q[h] * (F(1) / np.sqrt(ms / F(hd) + F(c.rms_norm_eps))))
        kv = bf(self.mv8(self.w["wkv"], x))
        kv = bf(rms(kv, self.kv_norm, c.rms_norm_eps))
        cs, sn = rope_cs(c, pos, self.ratio != 0)
        for h in range(nh):
            q[h, hd - rd:] = bf(rot(q[h, hd - rd:], cs, sn))
        kv[hd - rd:] = bf(rot(kv[hd - rd:], cs, sn))
        kv[:hd - rd] = bf(qdq_fp8(kv[:hd - rd], 64))
        self.window.append(kv)
        W = c.sliding_window
        keys = self.window[-W:]
        if self.ratio:
            keys = keys + ([self.compressed[j] for j in sel] if sel is not None else list(self.compressed))
        K = np.stack(keys)
        att = np.zeros((nh, hd), F)
        scale = F(1) / np.sqrt(F(hd))
        for h in range(nh):
            s = dot8(K, q[h]) * scale
            m = s.max()
            den = F(np.exp(self.sink[h] - m))
            o = np.zeros(hd, F)
            for j in range(len(keys)):
                pr = F(np.exp(s[j] - m))
                den += pr
                o += bf(pr) * K[j]
            att[h] = bf(o / den)
            att[h, hd - rd:] = bf(rot(att[h, hd - rd:], cs, sn, inv=True))
        G, R = c.o_groups, c.o_lora_rank
        flat = att.reshape(-1)
        gw = nh // G * hd
        oa = np.concatenate([self.mv8(self.w["wo_a"][g * R:(g + 1) * R], flat[g * gw:(g + 1) * gw])
                             for g in range(G)])
        oa = bf(oa)
        return bf(self.mv8(self.w["wo_b"], oa))

    def moe(self, x, tok):
        c = self.c
        logits = dot8(self.gate, x)
        sp = np.maximum(logits, 0) + np.log1p(np.exp(-np.abs(logits)))
        score = np.sqrt(sp).astype(F)
        if self.hash:
            idx = [int(v) for v in self.tid[tok]]
        else:
            sel = score + self.bias
            idx, taken = [], set()
            for _ in range(c.num_experts_per_tok):
                b = max((e for e in range(len(sel)) if e not in taken), key=lambda e: (sel[e], -e))
                idx.append(b)
                taken.add(b)
        tot = F(0)
        for i in idx:
            tot += score[i]
        wts = [F(score[i]) / tot * F(c.routed_scaling_factor) for i in idx]
        lim = F(c.swiglu_limit)

        def act(gv, uv):
            if lim > 0:
                gv, uv = np.minimum(gv, lim), np.clip(uv, -lim, lim)
            return (gv * sigmoid(gv) * uv).astype(F)  # coli_v4_swiglu

        s = self.shared
        a = bf(act(bf(self.mv8(s["w1"], x)), bf(self.mv8(s["w3"], x))))
        sh = bf(self.mv8(s["w2"], a))
        out = np.zeros_like(x)
        for e in range(c.n_routed_experts):
            if e not in idx:
                continue
            w = wts[idx.index(e)]
            ex = self.experts[e]
            a = bf(act(bf(self.mv8(ex["w1"], x)), bf(self.mv8(ex["w3"], x))) * w)
            out += bf(self.mv8(ex["w2"], a))
        return bf(out + sh)

    def hc_pre(self, X, site):
        c = self.c
        fn, scale, base = self.hc[site]
        hc, d = X.shape
        flat = X.reshape(-1)
        inv = F(1) / np.sqrt(seqsum(flat * flat) / F(hc * d) + F(c.rms_norm_eps))
        mix = dot8(fn, flat) * inv
        sig = sigmoid
        pre = sig(mix[:hc] * scale[0] + base[:hc]) + F(c.hc_eps)
        post = F(2) * sig(mix[hc:2 * hc] * scale[1] + base[hc:2 * hc])
        cm = (mix[2 * hc:] * scale[2] + base[2 * hc:]).reshape(hc, hc)
        cm = np.exp(cm - cm.max(1, keepdims=True))
        cm = cm / cm.sum(1, keepdims=True) + F(c.hc_eps)
        cm = cm / (cm.sum(0, keepdims=True) + F(c.hc_eps))
        for _ in range(1, c.hc_sinkhorn_iters):
            cm = cm / (cm.sum(1, keepdims=True) + F(c.hc_eps))
            cm = cm / (cm.sum(0, keepdims=True) + F(c.hc_eps))
        red = (pre[:, None] * X).sum(0).astype(F)
        return red, post.astype(F), cm.astype(F)

    def block(self, X, tok, pos):
        c = self.c
        for site, norm in (("attn", self.attn_norm), ("ffn", self.ffn_norm)):
            red, post, comb = self.hc_pre(X, site)
            xn = bf(rms(bf(red), norm, c.rms_norm_eps))
            br = self.attention(xn, pos) if site == "attn" else self.moe(xn, tok)
            X = bf(comb.T @ X + post[:, None] * br[None, :])
        return X


TOLERANCE = 1e-5


def logits(ckpt, ids):
    c = Cfg(json.load(open(os.path.join(ckpt, "config.json"))))
    t = read_st(ckpt)
    layers = [Layer(t, c, l) for l in range(c.num_hidden_layers)]
    emb, head = tensor(t, "embed.weight"), tensor(t, "head.weight")
    hfn, hb, hs, norm = (tensor(t, n) for n in ("hc_head_fn", "hc_head_base", "hc_head_scale",
                                                 "norm.weight"))
    out = []
    for pos, tok in enumerate(ids):
        X = np.tile(emb[tok], (c.hc_mult, 1)).astype(F)
        for L in layers:
            X = L.block(X, tok, pos)
        flat = X.reshape(-1)
        inv = F(1) / np.sqrt(seqsum(flat * flat) / F(len(flat)) + F(c.rms_norm_eps))
        z = dot8(hfn, flat) * inv * hs[0] + hb
        pre = sigmoid(z) + F(c.hc_eps)
        y = bf((pre[:, None] * X).sum(0))
        y = bf(rms(y, norm, c.rms_norm_eps))
        out.append(dot8(head, y))
    return np.stack(out)


def expand(src, dst):
    """A copy with every FP8 dense weight and FP4 expert stored as BF16, decoded here (both
    exact in bf16), their scales dropped."""
    shutil.copytree(src, dst)
    files = sorted(f for f in os.listdir(dst) if f.endswith(".safetensors"))
    where, total = {}, 0
    for f in files:
        t = read_st_file(os.path.join(dst, f))
        out = {}
        for name, (dt, shape, raw) in t.items():
            if name.endswith(".scale"):
                continue
            stem = name[:-len(".weight")] if name.endswith(".weight") else None
            if stem is not None and stem + ".scale" in t and dt in ("F8_E4M3", "I8"):
                m = fp8_weight(t, stem) if dt == "F8_E4M3" else fp4_weight(t, stem)
                bits = (m.astype(F).view(np.uint32) >> 16).astype(np.uint16)
                out[name] = ("BF16", list(m.shape), bits.tobytes())
            else:
                out[name] = (dt, shape, raw)
            where[name] = f
        header, blobs, off = {}, [], 0
        for name, (dt, shape, raw) in out.items():
            header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
            blobs.append(raw)
            off += len(raw)
        total += off
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(dst, f), "wb") as fh:
            fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    idx = os.path.join(dst, "model.safetensors.index.json")
    if os.path.exists(idx):
        j = json.load(open(idx))
        j["weight_map"] = where
        j.setdefault("metadata", {})["total_size"] = total
        json.dump(j, open(idx, "w"))
    return 0


def main(argv):
    if argv and argv[0] == "--expand":
        return expand(argv[1], argv[2])
    ckpt, ids, prompt_len, given_path = argv[:4]
    full, n = [int(x) for x in ids.split(",")], int(prompt_len)
    ref = logits(ckpt, full).astype(np.float64)
    given = np.load(given_path).astype(np.float64).reshape(ref.shape[0], -1)
    if given.shape != ref.shape:
        print(f"logits: shape {given.shape}, expected {ref.shape}")
        return 1
    rel = float(np.abs(given - ref).max() / np.abs(ref).max())
    print(f"logits: max abs diff / max abs logit = {rel:.3e} (tolerance {TOLERANCE:g})")
    ok = rel <= TOLERANCE
    am_ref, am_given = ref.argmax(-1).tolist(), given.argmax(-1).tolist()
    diff = [i for i in range(len(full)) if am_ref[i] != am_given[i]]
    print(f"argmax: {len(full) - len(diff)}/{len(full)} positions identical"
          + (f" (differ at {diff})" if diff else ""))
    ok &= not diff
    # Token by token, the greedy continuation is the argmax chain from the prompt's last row.
    greedy = [am_ref[i] for i in range(n - 1, len(full) - 1)]
    same = greedy == full[n:]
    print(f"greedy: {len(full) - n} tokens " + ("identical" if same else
                                               f"differ: {greedy} vs {full[n:]}"))
    ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
