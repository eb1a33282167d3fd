# An independent DeepSeek V4.1 Flash forward pass in torch (CPU, float64 arithmetic), written from what
# the runtime (upstream c/deepseek_v41.c) and upstream's torch reference (c/tools/dsv41_ref.py)
# compute -- docs/model.md "DeepSeek V4 / V4.1" and reference/colibri-engines.md §1.15 describe
# them -- not from qrepack's C++. It steps one token at a time, as the runtime decodes: a ring
# of window_size raw KV per layer, a compressor state that pools a group when its last token
# lands, compressed KV and index-key caches that grow a row per completed group, the indexer
# run per step; qrepack's pass runs every position of a prompt at once instead. Which index
# keys an indexer scores follows the runtime: while reading the prompt (the rows the runtime
# takes as one prefill chunk) its kv owner's (the nearest kv source at or before it); after it,
# in the decode steps, those model.py's module-level shared_attn holds: the keys of the kv
# source that completed a group last, at this step or an earlier one, zero past the rows it
# had then.
#
#   deepseek_v4_forward.py CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY
#     FULL_IDS: comma-separated ids; LOGITS_NPY: f32 [len(FULL_IDS), vocab], row t the logits
#     after token t (teacher-forced). Checks, one line each:
#     - logits: max|ref - given| / max|ref| <= 1e-5;
#     - argmax: identical at every position;
#     - greedy: the greedy continuation of FULL_IDS[:PROMPT_LEN] (argmax, first index on ties),
#       continued from the prompt's state in decode steps, equals FULL_IDS[PROMPT_LEN:].
#     Exit 0 when all pass, 1 otherwise.
#   deepseek_v4_forward.py --logits CKPT_DIR FULL_IDS OUT_NPY   writes this reference's logits.
#   deepseek_v4_forward.py --expand CKPT_DIR DST   a copy whose FP8 dense weights, FP4 experts
#     and engram table are BF16 (this file's own decoding; every value is exact in BF16): the
#     same model.
#   deepseek_v4_forward.py --drop CKPT_DIR DST NAME   a copy without tensor NAME.
#
# Weights: BF16 / F32; FP8 e4m3 "<p>.weight" with F8_E8M0 "<p>.scale" in 32x32 tiles (or one
# per row group of 32 for the engram table); FP4 experts as I8 "<p>.weight" [O, I/2] (e2m1
# nibbles, even column low, sign bit 3) with F8_E8M0 "<p>.scale" [O, I/32]. E8M0 byte b is
# 2^(b - 127).
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from forward_check import check_against

torch.set_grad_enabled(False)
# Computed in float64 from the exactly decoded weights: the tolerance then measures the f32
# pass against the arithmetic itself (a float32 torch pass strays up to ~5e-5 of the largest
# logit on the fixture where attention outputs cancel; qrepack's stays under ~5e-6).
torch.set_default_dtype(torch.float64)

TOLERANCE = 1e-5
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


class RefError(Exception):
    pass


def read_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        data = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], data[8 + n + a:8 + n + b])
    return out


def e4m3_table():
    """The 256 e4m3fn values: sign, 4 exponent bits (bias 7), 3 mantissa bits; 0x7f/0xff NaN."""
    v = []
    for b in range(256):
        s, e, m = -1.0 if b & 0x80 else 1.0, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v.append(float("nan"))
        elif e == 0:
            v.append(s * m / 8.0 * 2.0 ** -6)
        else:
            v.append(s * (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(v, dtype=np.float64)


E4M3 = e4m3_table()


def e8m0(raw, shape):
    e = np.frombuffer(raw, np.uint8).reshape(shape).astype(np.int64)
    if (e == 255).any():
        raise RefError("an E8M0 scale of 255 (NaN)")
    return np.power(2.0, e - 127)


class Weights:
    def __init__(self, d):
        self.t = read_dir(d)
        self.cache = {}

    def get(self, name, shape):
        key = (name, tuple(shape))
        if key not in self.cache:
            self.cache[key] = torch.from_numpy(np.ascontiguousarray(self.decode(name, shape),
                                                                    dtype=np.float64))
        return self.cache[key]

    def decode(self, name, shape):
        rows, cols = shape if len(shape) == 2 else (1, shape[0])
        dt, _, raw = self.t[name]
        scale = name[:-len(".weight")] + ".scale" if name.endswith(".weight") else None
        if dt in ("F32", "BF16"):
            if dt == "F32":
                v = np.frombuffer(raw, "<f4").astype(np.float64)
            else:
                v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            if v.size != rows * cols:
                raise RefError(f"{name}: {v.size} values for {shape}")
            return v.reshape(shape)
        if dt == "F8_E4M3":
            q = E4M3[np.frombuffer(raw, np.uint8)].reshape(rows, cols)
            sdt, sshape, sraw = self.t[scale]
            if list(sshape) == [rows, cols // 32]:  # row groups of 32 (the engram table)
                return q * np.repeat(e8m0(sraw, sshape), 32, axis=1)
            tiles = e8m0(sraw, sshape)  # 32x32 tiles
            return q * np.repeat(np.repeat(tiles, 32, axis=0), 32, axis=1)[:rows, :cols]
        if dt == "I8":
            b = np.frombuffer(raw, np.uint8).reshape(rows, cols // 2)
            codes = np.stack([b & 15, b >> 4], axis=-1).reshape(rows, cols)
            table = np.array(E2M1 + [-x for x in E2M1])
            sdt, sshape, sraw = self.t[scale]
            return table[codes] * np.repeat(e8m0(sraw, sshape), 32, axis=1)
        raise RefError(f"{name}: dtype {dt}")


def rms(x, w, eps):
    return w * x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def pick(d, keys, default):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


class Config:
    """config.json (text_config when present) with c/deepseek_v41.c's defaults."""

    def __init__(self, d):
        root = json.load(open(os.path.join(d, "config.json")))
        t = root.get("text_config", root)
        g = lambda keys, default: pick(t, keys, default)
        self.vocab, self.dim = g(["vocab_size"], 0), g(["dim", "hidden_size"], 0)
        self.layers = g(["n_layers", "num_hidden_layers"], 0)
        self.heads, self.hd = g(["n_heads", "num_attention_heads"], 0), g(["head_dim"], 0)
        self.rd = g(["rope_head_dim", "qk_rope_head_dim"], 0)
        self.q_lora, self.o_lora, self.o_groups = g(["q_lora_rank"], 0), g(["o_lora_rank"], 0), g(["o_groups"], 1)
        self.inter = g(["moe_inter_dim", "moe_intermediate_size"], 0)
        self.experts = g(["n_routed_experts"], 0)
        self.topk = g(["n_activated_experts", "num_experts_per_tok"], 0)
        self.norm_topk = bool(g(["norm_topk_prob"], 1))
        self.route_scale = g(["route_scale", "routed_scaling_factor"], 1.0)
        self.limit = g(["swiglu_limit"], 0.0)
        self.eps = float(np.float32(g(["norm_eps", "rms_norm_eps"], 1e-6)))
        self.win = g(["window_size", "sliding_window"], 128)
        self.ratios = g(["compress_ratios"], [])[:self.layers]
        self.kv_src = set(g(["kv_source_layers", "kv_source_layer_ids"], []))
        self.ix_src = set(g(["index_source_layers", "index_source_layer_ids"], []))
        self.ctheta, self.theta = g(["compress_rope_theta"], 40000.0), g(["rope_theta"], 10000.0)
        self.factor, self.orig = g(["rope_factor"], 1.0), g(["original_seq_len"], 0)
        self.bfast, self.bslow = g(["beta_fast"], 32), g(["beta_slow"], 1)
        rs = t.get("rope_scaling") or {}
        self.factor = rs.get("factor", self.factor)
        self.bfast, self.bslow = rs.get("beta_fast", self.bfast), rs.get("beta_slow", self.bslow)
        self.orig = rs.get("original_max_position_embeddings", self.orig)
        self.ih, self.idim, self.itopk = g(["index_n_heads"], 0), g(["index_head_dim"], 0), g(["index_topk"], 0)
        self.cand = g(["candidate_source_layer", "candidate_source_layer_id"], -1)
        self.cand_blocks, self.cand_size = g(["candidate_topk_blocks"], 0), g(["candidate_block_size"], 0)
        self.hc, self.hc_iters, self.hc_eps = g(["hc_mult"], 1), g(["hc_sinkhorn_iters"], 20), g(["hc_eps"], 1e-6)
        self.max_seq = g(["max_seq_len", "max_position_embeddings"], 4096)
        self.engram_layers = g(["engram_layer_ids"], [])
        self.engram = None
        if self.engram_layers:
            self.engram = json.load(open(os.path.join(d, "dsv41_engram.json")))
        # the layer whose caches each layer reads: the nearest kv source at or before it
        self.owner, o = [], -1
        for layer in range(self.layers):
            o = layer if layer in self.kv_src else o
            self.owner.append(o)


def freqs(c, dim, compressed, n):
    """precompute_freqs_cis: angles [n, dim/2] (YaRN only on compressing layers)."""
    base = c.ctheta if compressed else c.theta
    # model.py computes the frequencies in float32
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if compressed and 0 < c.orig < c.max_seq:
        def corr(rot):
            return dim * math.log(c.orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(math.floor(corr(c.bfast)), 0), min(math.ceil(corr(c.bslow)), dim - 1)
        hi = hi + 0.001 if lo == hi else hi
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        f = f / c.factor * ramp + f * (1 - ramp)
    ang = torch.outer(torch.arange(n, dtype=torch.float32), f).double()
    return torch.cos(ang), torch.sin(ang)


def rotate(x, cos, sin, inverse=False):
    """Interleaved pairs (x[2k], x[2k+1]) of the last dim times e^(+-i angle)."""
    a, b = x[..., 0::2], x[..., 1::2]
    s = -sin if inverse else sin
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * s, a * s + b * cos
    return out


def rope_tail(x, rd, cos, sin, inverse=False):
    return torch.cat([x[..., :-rd], rotate(x[..., -rd:], cos, sin, inverse)], dim=-1)


class State:
    """Everything a decode step reads from the steps before it."""

    def __init__(self, c, chunk):
        self.chunk = chunk                                  # rows read as the prompt
        self.published = None                               # shared_attn's index keys
        self.pos = 0
        self.history = []                                   # compressed ids (engram)
        self.window = [[] for _ in range(c.layers)]         # raw KV per position
        self.group = {l: ([], []) for l in c.kv_src}        # compressor kv / score of a group
        self.ckv = {l: [] for l in c.kv_src}                # compressed KV rows (rotated)
        self.ikey = {l: [] for l in c.kv_src}               # index key rows (rotated)
        self.topk = None                                    # the last index source's picks
        self.keep = None                                    # the candidate source's blocks


class Model:
    def __init__(self, d):
        self.c = c = Config(d)
        self.w = Weights(d)
        n = c.max_seq
        self.rope = {False: freqs(c, c.rd, False, n), True: freqs(c, c.rd, True, n)}

    def m(self, name, rows, cols):
        return self.w.get(name, [rows, cols])

    def v(self, name, n):
        return self.w.get(name, [n])

    def lin(self, x, name, rows):
        return x @ self.m(name, rows, x.shape[-1]).T

    # -- hyper-connections (dsv41_ref.hc_split_sinkhorn, Block.hc_pre / hc_post) ----------

    def mixes(self, h, p, which):
        c, hc = self.c, self.c.hc
        flat = h.reshape(-1)
        mix = (self.m(f"{p}hc_{which}_fn", (2 + hc) * hc, hc * c.dim) @ flat)
        mix = mix * torch.rsqrt(flat.square().mean() + c.eps)
        scale, base = self.v(f"{p}hc_{which}_scale", 3), self.v(f"{p}hc_{which}_base", (2 + hc) * hc)
        pre = torch.sigmoid(mix[:hc] * scale[0] + base[:hc]) + c.hc_eps
        post = 2 * torch.sigmoid(mix[hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = (mix[2 * hc:] * scale[2] + base[2 * hc:]).reshape(hc, hc).softmax(-1) + c.hc_eps
        comb = comb / (comb.sum(0, keepdim=True) + c.hc_eps)
        for _ in range(c.hc_iters - 1):
            comb = comb / (comb.sum(1, keepdim=True) + c.hc_eps)
            comb = comb / (comb.sum(0, keepdim=True) + c.hc_eps)
        return pre, post, comb

    @staticmethod
    def expand(h, y, post, comb):
        # copy j takes sum_i comb[i][j] * copy i, plus post[j] * y
        return comb.T @ h + post[:, None] * y[None, :]

    # -- engram (engram.py, NgramHash) -----------------------------------------------------

    def hash_rows(self, k, s):
        e = self.c.engram
        n, pad = e["max_ngram_size"], e["pad_id"]
        pos = len(s.history) - 1
        tokens = [pad if pos - i < 0 else s.history[pos - i] for i in range(n)]
        mult = [int(x) for x in e["multipliers"][k]]
        wrap = lambda v: (v + 2 ** 63) % 2 ** 64 - 2 ** 63   # int64, as torch computes it
        rolling, rows = wrap(tokens[0] * mult[0]), []
        for i in range(1, n):
            rolling = wrap(rolling ^ wrap(tokens[i] * mult[i]))
            for h in range(e["n_heads"]):
                col = (i - 1) * e["n_heads"] + h
                rows.append(rolling % e["primes"][k][i - 1][h] + e["offsets"][k][col])  # floor mod
        return rows

    def engram(self, layer, h, s):
        c, e = self.c, self.c.engram
        k = e["layer_ids"].index(layer)
        p, hd = f"layers.{layer}.engram.", e["head_dim"]
        table = self.m(p + "embed.weight", e["num_embeddings"][k], hd)
        rows = torch.cat([table[r] for r in self.hash_rows(k, s)])
        kv = self.lin(rows, p + "wkv.weight", (c.hc + 1) * c.dim)
        key, value = kv[:c.hc * c.dim].reshape(c.hc, c.dim), kv[c.hc * c.dim:]
        wq = self.m(p + "q_weight", c.hc, c.dim) * self.m(p + "k_weight", c.hc, c.dim)
        rstd = torch.rsqrt(h.square().mean(-1) + c.eps) * torch.rsqrt(key.square().mean(-1) + c.eps)
        dot = (h * wq * key).sum(-1) * rstd / math.sqrt(c.dim)
        gate = torch.sigmoid(torch.sign(dot) * dot.abs().clamp_min(1e-6).sqrt())
        return h + gate[:, None] * value[None, :]

    # -- attention (one position) -------------------------------------------------------------

    def compressor(self, layer, x, s):
        """The latent of the group this token completes (unrotated), or None."""
        c, p = self.c, f"layers.{layer}.attn.compressor."
        r = c.ratios[layer]
        kv = self.lin(x, p + "wkv.weight", c.hd)
        if r > 1:
            kvs, scores = s.group[layer]
            kvs.append(kv)
            scores.append(self.lin(x, p + "wgate.weight", c.hd))
            if len(kvs) < r:
                return None
            kv = (torch.stack(kvs) * torch.stack(scores).softmax(0)).sum(0)
            kvs.clear()
            scores.clear()
        return rms(kv, self.v(p + "norm.weight", c.hd), c.eps)

    def indexer(self, layer, x, qr, s, pos, offset):
        c, p = self.c, f"layers.{layer}.attn.indexer."
        r = c.ratios[layer]
        lens = (pos + 1) // r
        cos, sin = (t[pos] for t in self.rope[True])
        q = self.lin(qr, p + "wq_b.weight", c.ih * c.idim).reshape(c.ih, c.idim)
        q = rope_tail(q, c.rd, cos, sin)
        if pos < s.chunk:
            keys = torch.stack(s.ikey[c.owner[layer]][:lens])
        else:
            have = s.ikey[s.published][:lens]
            keys = torch.stack(have + [torch.zeros(c.idim)] * (lens - len(have)))
        wts = self.lin(x, p + "weights_proj.weight", c.ih) * (c.idim ** -0.5 * c.ih ** -0.5)
        score = ((q @ keys.T).relu() * wts[:, None]).sum(0)         # [lens]
        if layer == c.cand:
            nb = (lens + c.cand_size - 1) // c.cand_size
            best = [max(score[b * c.cand_size:(b + 1) * c.cand_size].tolist()) for b in range(nb)]
            best[nb - 1] = math.inf                                 # the newest block stays
            order = sorted(range(nb), key=lambda b: (-best[b], b))[:c.cand_blocks]
            s.keep = [any(j // c.cand_size == b for b in order) for j in range(lens)]
        elif 0 <= c.cand < layer:
            score = torch.where(torch.tensor(s.keep[:lens]), score, torch.tensor(-math.inf))
        k = min(c.itopk, lens)
        order = sorted((j for j in range(lens) if score[j] > -math.inf),
                       key=lambda j: (-float(score[j]), j))[:k]
        picks = sorted(order)
        return [j + offset for j in picks] + [-1] * (k - len(picks))

    def attention(self, layer, x, s):
        c, p, pos = self.c, f"layers.{layer}.attn.", s.pos
        r = c.ratios[layer]
        cos, sin = (t[pos] for t in self.rope[r > 0])
        qr = rms(self.lin(x, p + "wq_a.weight", c.q_lora), self.v(p + "q_norm.weight", c.q_lora), c.eps)
        q = rope_tail(self.lin(qr, p + "wq_b.weight", c.heads * c.hd).reshape(c.heads, c.hd), c.rd, cos, sin)
        kv = rms(self.lin(x, p + "wkv.weight", c.hd), self.v(p + "kv_norm.weight", c.hd), c.eps)
        s.window[layer].append(rope_tail(kv, c.rd, cos, sin))
        keys = s.window[layer][max(0, pos + 1 - c.win):]
        idx = list(range(len(keys)))
        if r:
            if layer in c.kv_src:
                latent = self.compressor(layer, x, s)
                if latent is not None:
                    at = pos + 1 - r                            # the group's first position
                    gc, gs = (t[at] for t in self.rope[True])
                    if layer in c.ix_src:
                        ik = rms(self.lin(latent, p + "indexer.wk.weight", c.idim),
                                 self.v(p + "indexer.k_norm.weight", c.idim), c.eps)
                        s.ikey[layer].append(rope_tail(ik, c.rd, gc, gs))
                        if pos >= s.chunk:
                            s.published = layer
                    s.ckv[layer].append(rope_tail(latent, c.rd, gc, gs))
            clen = (pos + 1) // r
            if layer in c.ix_src:
                s.topk = self.indexer(layer, x, qr, s, pos, len(keys)) if clen else []
            keys = keys + s.ckv[c.owner[layer]][:clen]
            idx = idx + s.topk
        kv_all = torch.stack(keys)
        sink = self.v(p + "attn_sink", c.heads)
        out = torch.zeros(c.heads, c.hd)
        valid = [j for j in idx if j >= 0]
        if valid:
            sel = kv_all[valid]
            sc = (q @ sel.T) / math.sqrt(c.hd)
            mx = torch.maximum(sc.max(-1).values, torch.tensor(-1e30))
            e = torch.exp(sc - mx[:, None])
            out = (e @ sel) / (e.sum(-1) + torch.exp(sink - mx))[:, None]
        out = rope_tail(out, c.rd, cos, sin, inverse=True).reshape(c.o_groups, -1)
        wo_a = self.m(p + "wo_a.weight", c.o_groups * c.o_lora, c.heads * c.hd // c.o_groups)
        grouped = torch.cat([wo_a[g * c.o_lora:(g + 1) * c.o_lora] @ out[g] for g in range(c.o_groups)])
        return self.lin(grouped, p + "wo_b.weight", c.dim)

    # -- MoE ----------------------------------------------------------------------------------

    def ffn(self, p, x):
        c = self.c
        g, u = self.lin(x, p + "w1.weight", c.inter), self.lin(x, p + "w3.weight", c.inter)
        if c.limit > 0:
            u, g = u.clamp(-c.limit, c.limit), g.clamp(max=c.limit)
        return self.lin(F.silu(g) * u, p + "w2.weight", c.dim)

    def moe(self, p, x):
        c = self.c
        scores = F.softplus(self.lin(x, p + "gate.weight", c.experts)).sqrt()
        biased = (scores + self.v(p + "gate.bias", c.experts)).tolist()
        chosen = sorted(range(c.experts), key=lambda e: (-biased[e], e))[:c.topk]
        w = scores[chosen]
        if c.norm_topk and c.topk > 1:
            w = w / (w.sum() + 1e-20)
        w = w * c.route_scale
        y = self.ffn(p + "shared_experts.", x)
        for k, e in enumerate(chosen):
            y = y + w[k] * self.ffn(f"{p}experts.{e}.", x)
        return y

    # -- one token ------------------------------------------------------------------------------

    def step(self, token, s):
        c = self.c
        if s.pos == s.chunk:  # the prompt read: the last kv source that completed a group
            for layer in sorted(c.kv_src & c.ix_src):
                if c.ratios[layer] and s.ikey[layer]:
                    s.published = layer
        if c.engram:
            s.history.append(c.engram["token_map"][token])
        h = self.m("embed.weight", c.vocab, c.dim)[token][None, :].repeat(c.hc, 1)
        pre = torch.zeros(c.hc)
        pre[0] = 1
        for layer in range(c.layers):
            p = f"layers.{layer}."
            if layer in c.engram_layers:
                h = self.engram(layer, h, s)
            a_pre, a_post, a_comb = self.mixes(h, p, "attn")
            y = rms(pre @ h, self.v(p + "attn_norm.weight", c.dim), c.eps)
            h = self.expand(h, self.attention(layer, y, s), a_post, a_comb)
            f_pre, f_post, f_comb = self.mixes(h, p, "ffn")
            y = rms(a_pre @ h, self.v(p + "ffn_norm.weight", c.dim), c.eps)
            h = self.expand(h, self.moe(p + "ffn.", y), f_post, f_comb)
            pre = f_pre
        s.pos += 1
        y = rms(pre @ h, self.v("norm.weight", c.dim), c.eps)
        return self.lin(y, "head.weight", c.vocab)

    def logits(self, ids):
        s = State(self.c, len(ids))
        return torch.stack([self.step(t, s) for t in ids]), s


def write_safetensors(path, tensors):
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, raw in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    js = json.dumps(head, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(t[3] for t in tensors))


def expand(src, dst):
    """A copy with every FP8 dense weight and FP4 expert as BF16, decoded here."""
    shutil.copytree(src, dst)
    w = Weights(src)
    idx_path = os.path.join(dst, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    done = 0
    for f in sorted(os.listdir(dst)):
        if not f.endswith(".safetensors"):
            continue
        out = []
        for name, (dt, shape, raw) in read_dir_file(os.path.join(dst, f)).items():
            base = name[:-len(".scale")] if name.endswith(".scale") else None
            if base is not None and base + ".weight" in w.t:
                del idx["weight_map"][name]
                continue
            if dt not in ("F8_E4M3", "I8"):
                out.append((name, dt, shape, raw))
                continue
            cols = shape[1] * (2 if dt == "I8" else 1)
            v = w.decode(name, [shape[0], cols]).astype(np.float32)
            bf = (v.view(np.uint32) >> 16).astype("<u2")
            if not np.array_equal((bf.astype(np.uint32) << 16).view(np.float32), v):
                raise RefError(f"{name}: a decoded value is not exact in BF16")
            out.append((name, "BF16", [shape[0], cols], bf.tobytes()))
            done += 1
        write_safetensors(os.path.join(dst, f), out)
    json.dump(idx, open(idx_path, "w"), indent=2)
    print(f"expanded {done} FP8 / FP4 matrices to BF16")
    return 0


def drop(src, dst, name):
    shutil.copytree(src, dst)
    idx_path = os.path.join(dst, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    shard = idx["weight_map"].pop(name)
    t = read_dir_file(os.path.join(dst, shard))
    write_safetensors(os.path.join(dst, shard),
                      [(k, dt, shape, raw) for k, (dt, shape, raw) in t.items() if k != name])
    json.dump(idx, open(idx_path, "w"), indent=2)
    return 0


def read_dir_file(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    items = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                   key=lambda kv: kv[1]["data_offsets"][0])
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in items}


def main(argv):
    if argv and argv[0] == "--drop":
        return drop(argv[1], argv[2], argv[3])
    if argv and argv[0] == "--expand":
        return expand(argv[1], argv[2])
    if argv and argv[0] == "--logits":
        ckpt, ids, out = argv[1:4]
        lo, _ = Model(ckpt).logits([int(x) for x in ids.split(",")])
        np.save(out, lo.numpy().astype(np.float32))
        return 0
    ckpt, ids, prompt_len, given_path = argv[:4]
    full, n = [int(x) for x in ids.split(",")], int(prompt_len)
    model = Model(ckpt)
    ref, _ = model.logits(full)
    given = torch.from_numpy(np.load(given_path))
    return check_against(ref, given, full, n, lambda: State(model.c, n), model.step, TOLERANCE)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RefError, KeyError) as e:
        print(f"deepseek_v4_forward.py: {e}")
        sys.exit(1)
