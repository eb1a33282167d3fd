# An independent GLM-5.3-Flash text forward pass in torch (CPU, float32), written from what the
# runtime computes (upstream c/glm53.c with its headers hyper_connections.h, delta_attention.h
# and sparse_index.h, as docs/model.md "GLM-5.3-Flash" describes them), not from qrepack's C++.
# It steps token by token like the runtime's session does: a recurrent state and conv window
# per KDA layer; per MLA layer the cached keys / values and the indexer's keys and pooling
# gates, the indexer selecting again at every query; qrepack's pass runs layer by layer over
# whole sequences instead.
#
#   glm53_forward.py CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY
#     FULL_IDS: comma-separated ids; LOGITS_NPY: f32 [len(FULL_IDS), vocab], row t the logits
#     after token t (teacher-forced). Checks, one line each:
#     - logits: max|ref - given| / max|ref| <= 1e-5;
#     - argmax: identical at every position;
#     - greedy: the greedy continuation of FULL_IDS[:PROMPT_LEN] (argmax, first index on ties),
#       continued from the prompt's state, equals FULL_IDS[PROMPT_LEN:].
#     Exit 0 when all pass, 1 otherwise.
#   glm53_forward.py --logits CKPT_DIR FULL_IDS OUT_NPY   writes this reference's logits.
#
# Weights: BF16 / F16 / F32; F8_E4M3 with an F32 128x128 "<name>_scale_inv" (decoded here from
# the e4m3 bit fields: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits, subnormals at
# exponent 0, 0x7f / 0xff NaN); colibri-glm53's routed experts (U8 "<name>" + F32
# "<name>.qs": int4 groups of 64 columns, offset-binary q + 8, column 2k in the low nibble).
import json
import os
import sys

import numpy as np
import torch
from forward_check import check_against
from st_formats import e4m3_table, read_dir

torch.set_grad_enabled(False)

TOLERANCE = 1e-5


class RefError(Exception):
    pass


E4M3 = e4m3_table().astype(np.float64)  # every E4M3 value is exact in float32


def floats(dtype, raw):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").astype(np.float32)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32)
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    raise RefError(f"dtype {dtype} is not a float")


class Weights:
    def __init__(self, d):
        self.t = read_dir(d)
        self.pfx = ("model.language_model." if "model.language_model.embed_tokens.weight" in self.t
                    else "model.")
        self.cache = {}

    def raw(self, name):
        return self.t[name] if name in self.t else self.t[self.pfx + name]

    def full_name(self, name):
        return name if name in self.t else self.pfx + name

    def vec(self, name, n, at_least=False):
        dt, _, raw = self.raw(name)
        v = floats(dt, raw)
        if v.size != n and not (at_least and v.size >= n):
            raise RefError(f"{name}: {v.size} values, expected {n}")
        return torch.from_numpy(v[:n].copy())

    def mat(self, name, rows, cols):
        key = (name, rows, cols)
        if key not in self.cache:
            self.cache[key] = torch.from_numpy(np.ascontiguousarray(
                self.decode(self.full_name(name), rows, cols), dtype=np.float32))
        return self.cache[key]

    def decode(self, n, rows, cols):
        dt, _, raw = self.t[n]
        if n + ".qs" in self.t:
            codes = np.frombuffer(raw, np.uint8)
            qs = floats(self.t[n + ".qs"][0], self.t[n + ".qs"][2])
            if cols % 64 or codes.size != rows * cols // 2 or qs.size != rows * cols // 64:
                raise RefError(f"{n}: {codes.size} bytes / {qs.size} scales are not int4-g64")
            b = codes.reshape(rows, cols // 2)
            q = np.stack([b & 15, b >> 4], axis=-1).reshape(rows, cols).astype(np.float32) - 8
            return q * np.repeat(qs.reshape(rows, cols // 64), 64, axis=1)
        if dt == "F8_E4M3":
            s = floats(*[self.t[n + "_scale_inv"][i] for i in (0, 2)])
            sr, sc = (rows + 127) // 128, (cols + 127) // 128
            if s.size != sr * sc:
                raise RefError(f"{n}_scale_inv: {s.size} scales for [{rows}, {cols}]")
            w = E4M3[np.frombuffer(raw, np.uint8)].reshape(rows, cols)
            scale = s.reshape(sr, sc).astype(np.float64)
            full = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:rows, :cols]
            return (w * full).astype(np.float32)
        m = floats(dt, raw)
        if m.size != rows * cols:
            raise RefError(f"{n}: {m.size} values for [{rows}, {cols}]")
        return m.reshape(rows, cols)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def clamped_swiglu(g, u, limit):
    return torch.nn.functional.silu(g.clamp(max=limit)) * u.clamp(-limit, limit)


class Model:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        c = cfg.get("text_config", cfg)
        la = c["linear_attn_config"]
        self.c = c
        self.D, self.V, self.L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.limit = c["swiglu_limit"]
        self.scale = c.get("routed_scaling_factor", 1.0)
        kinds = c.get("mlp_layer_types", [])
        self.first_dense = c.get("first_k_dense_replace", next(
            (i for i, k in enumerate(kinds) if "sparse" in k), len(kinds)))
        self.full = [("linear" not in t) for t in c["layer_types"]]
        self.kh, self.hd, self.ck = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
        self.lb = la.get("gate_lower_bound", -5.0)
        self.H = c.get("hc_mult", 1)
        self.iters, self.hc_eps = c["hc_sinkhorn_iters"], c.get("hc_eps", 1e-6)
        self.w = Weights(d)

    def lin(self, x, name, o, i):
        return self.w.mat(name, o, i) @ x

    # ---- hyper-connections ------------------------------------------------------------------
    def hc_enter(self, p, streams):
        """streams [H, D] -> (block input [D], post [H], comb [H, H])."""
        H, D = self.H, self.D
        flat = streams.reshape(-1)
        fn = self.w.mat(p + "_fn", (2 + H) * H, H * D)
        base = self.w.vec(p + "_base", (2 + H) * H)
        sc = self.w.vec(p + "_scale", 3)
        mixes = (fn @ flat) * torch.rsqrt(flat.pow(2).mean() + self.eps)
        pre = torch.sigmoid(mixes[:H] * sc[0] + base[:H]) + self.hc_eps
        post = 2 * torch.sigmoid(mixes[H:2 * H] * sc[1] + base[H:2 * H])
        comb = torch.softmax((mixes[2 * H:] * sc[2] + base[2 * H:]).view(H, H), dim=-1)
        comb = comb + self.hc_eps
        comb = comb / (comb.sum(0, keepdim=True) + self.hc_eps)
        for _ in range(self.iters - 1):
            comb = comb / (comb.sum(1, keepdim=True) + self.hc_eps)
            comb = comb / (comb.sum(0, keepdim=True) + self.hc_eps)
        return (pre[:, None] * streams).sum(0), post, comb

    def hc_leave(self, streams, branch, post, comb):
        # stream j afterwards: sum_i comb[i, j] * stream_i + post[j] * branch
        return comb.t() @ streams + post[:, None] * branch[None, :]

    # ---- token mixers -----------------------------------------------------------------------
    def kda_step(self, p, x, s):
        H, hd, K = self.kh, self.hd, self.ck
        P = H * hd
        qkv = []
        for proj, conv in (("q_proj", "q_conv1d"), ("k_proj", "k_conv1d"), ("v_proj", "v_conv1d")):
            y = self.lin(x, p + proj + ".weight", P, self.D)
            win = torch.cat((s.get(conv, torch.zeros(P, K))[:, 1:], y[:, None]), dim=1)
            s[conv] = win
            qkv.append(torch.nn.functional.silu((self.w.mat(p + conv + ".weight", P, K) * win).sum(-1)))
        q, k, v = (t.view(H, hd) for t in qkv)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * hd ** -0.5
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        z = self.lin(self.lin(x, p + "f_a_proj.weight", hd, self.D), p + "f_b_proj.weight", P, hd)
        z = (z + self.w.vec(p + "dt_bias", P)).view(H, hd)
        a = torch.exp(self.w.vec(p + "A_log", H, at_least=True))
        decay = torch.exp(self.lb * torch.sigmoid(a[:, None] * z))
        beta = torch.sigmoid(self.lin(x, p + "b_proj.weight", H, self.D))
        S = s.get("S", torch.zeros(H, hd, hd)) * decay[:, :, None]
        err = (v - torch.einsum("hk,hkv->hv", k, S)) * beta[:, None]
        S = S + k[:, :, None] * err[:, None, :]
        s["S"] = S
        o = rms(torch.einsum("hk,hkv->hv", q, S), self.w.vec(p + "o_norm.weight", hd), self.eps)
        gate = self.lin(self.lin(x, p + "g_a_proj.weight", hd, self.D), p + "g_b_proj.weight", P, hd)
        o = o * torch.sigmoid(gate.view(H, hd))
        return self.lin(o.reshape(P), p + "o_proj.weight", self.D, P)

    def select(self, p, qa, x, s):
        """The DSA indexer's tokens for the newest query (positions 0 .. t-1 cached)."""
        c = self.c
        IH, ID, pool, topk = c["index_n_heads"], c["index_head_dim"], c["index_kpool"], c["index_topk"]
        ix = p + "indexer."
        q = self.lin(qa, ix + "wq_b.weight", IH * ID, c["q_lora_rank"]).view(IH, ID)
        key = torch.nn.functional.layer_norm(
            self.lin(x, ix + "wk.weight", ID, self.D), (ID,),
            self.w.vec(ix + "k_norm.weight", ID), self.w.vec(ix + "k_norm.bias", ID), 1e-5)
        s.setdefault("ik", []).append(key)
        s.setdefault("ig", []).append(self.lin(x, ix + "index_kpool_compress_gate", ID, self.D))
        hw = self.lin(x, ix + "weights_proj.weight", IH, self.D) * IH ** -0.5
        ape = self.w.mat(ix + "index_kpool_compress_ape", pool, ID)
        t = len(s["ik"])
        keys, gates = torch.stack(s["ik"]), torch.stack(s["ig"])
        n = t // pool  # complete pools, all visible to the newest query
        scores = []
        for i in range(n):
            wgt = torch.softmax(gates[i * pool:(i + 1) * pool] + ape, dim=0)  # per channel
            pooled = (wgt * keys[i * pool:(i + 1) * pool]).sum(0)
            scores.append((torch.relu(q @ pooled) * hw).sum() * ID ** -0.5)
        chosen = []
        if n:
            order = torch.sort(-torch.stack(scores), stable=True)[1][:topk // pool].tolist()
            for i in order:
                chosen += list(range(i * pool, (i + 1) * pool))
        if c.get("index_kpool_always_select_tail", False):
            chosen += list(range(n * pool, t))[:pool - 1]
        return chosen

    def mla_step(self, p, x, s):
        c = self.c
        H, nope, vd = c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"]
        kvr, qr = c["kv_lora_rank"], c["q_lora_rank"]
        qa = rms(self.lin(x, p + "q_a_proj.weight", qr, self.D),
                 self.w.vec(p + "q_a_layernorm.weight", qr), self.eps)
        q = self.lin(qa, p + "q_b_proj.weight", H * nope, qr).view(H, nope)
        lat = rms(self.lin(x, p + "kv_a_proj_with_mqa.weight", kvr, self.D),
                  self.w.vec(p + "kv_a_layernorm.weight", kvr), self.eps)
        kv = self.lin(lat, p + "kv_b_proj.weight", H * (nope + vd), kvr).view(H, nope + vd)
        s.setdefault("k", []).append(kv[:, :nope])
        s.setdefault("v", []).append(kv[:, nope:])
        chosen = self.select(p, qa, x, s)
        ctx = torch.zeros(H, vd)
        if chosen:
            keys = torch.stack([s["k"][j] for j in chosen], 1)  # [H, n, nope]
            vals = torch.stack([s["v"][j] for j in chosen], 1)
            w = torch.softmax(torch.einsum("hd,hnd->hn", q, keys) * nope ** -0.5, dim=-1)
            ctx = torch.einsum("hn,hnd->hd", w, vals)
        return self.lin(ctx.reshape(H * vd), p + "o_proj.weight", self.D, H * vd)

    # ---- MLPs -------------------------------------------------------------------------------
    def mlp(self, p, x, inter):
        h = clamped_swiglu(self.lin(x, p + "gate_proj.weight", inter, self.D),
                           self.lin(x, p + "up_proj.weight", inter, self.D), self.limit)
        return self.lin(h, p + "down_proj.weight", self.D, inter)

    def moe(self, p, x):
        c = self.c
        E, K, I = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        sc = torch.sigmoid(self.lin(x, p + "gate.weight", E, self.D))
        choice = sc + self.w.vec(p + "gate.e_score_correction_bias", E)
        sel = torch.sort(-choice, stable=True)[1][:K]
        wts = sc[sel] / (sc[sel].sum() + 1e-20) * self.scale
        y = self.mlp(p + "shared_experts.", x, I * c.get("n_shared_experts", 1))
        for e, we in zip(sel.tolist(), wts):
            y = y + we * self.mlp(f"{p}experts.{e}.", x, I)
        return y

    # ---- one token --------------------------------------------------------------------------
    def step(self, token, state):
        h = self.w.mat("embed_tokens.weight", self.V, self.D)[token]
        streams = h[None, :].repeat(self.H, 1)
        for i in range(self.L):
            lp = f"layers.{i}."
            x, post, comb = self.hc_enter(lp + "hc_attn", streams)
            x = rms(x, self.w.vec(lp + "input_layernorm.weight", self.D), self.eps)
            st = state[i]
            a = self.mla_step(lp + "self_attn.", x, st) if self.full[i] else \
                self.kda_step(lp + "self_attn.", x, st)
            streams = self.hc_leave(streams, a, post, comb)
            x, post, comb = self.hc_enter(lp + "hc_ffn", streams)
            x = rms(x, self.w.vec(lp + "post_attention_layernorm.weight", self.D), self.eps)
            f = self.mlp(lp + "mlp.", x, self.c["intermediate_size"]) if i < self.first_dense \
                else self.moe(lp + "mlp.", x)
            streams = self.hc_leave(streams, f, post, comb)
        out = rms(streams.mean(0), self.w.vec("norm.weight", self.D), self.eps)
        return self.lin(out, "lm_head.weight", self.V, self.D)

    def new_state(self):
        return [{} for _ in range(self.L)]

    def logits(self, ids):
        st = self.new_state()
        return torch.stack([self.step(t, st) for t in ids]), st


def main(argv):
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
    return check_against(ref, given, full, n, model.new_state, model.step, TOLERANCE)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RefError, KeyError) as e:
        print(f"glm53_forward.py: {e}")
        sys.exit(1)
