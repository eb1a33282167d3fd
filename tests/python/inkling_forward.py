# An independent reference forward pass of Inkling's text model, in torch (CPU, float32),
# written from the runtime's C source (upstream c/inkling.c: load_cfg, step_mm, attention,
# sconv_apply, dense_mlp, moe; transformers' modeling_inkling.py agrees), with its own
# safetensors reading and container decoding. It cross-checks the logits qrepack's C++ pass
# writes for a checkpoint:
#
#   inkling_forward.py CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY
#     FULL_IDS: comma-separated ids; LOGITS_NPY: f32 [len(FULL_IDS), unpadded vocab], row t the
#     logits predicting token t+1, teacher-forced over FULL_IDS. Checks, one line each:
#     - logits: max|ref - given| / max|ref| <= 1e-5;
#     - argmax: identical at every position;
#     - greedy: the greedy continuation of FULL_IDS[:PROMPT_LEN], recomputed here one token at a
#       time with the runtime's incremental state (KV cache, short-convolution histories),
#       equals FULL_IDS[PROMPT_LEN:].
#     Exit 0 when all pass, 1 otherwise.
#   inkling_forward.py --logits CKPT_DIR FULL_IDS OUT_NPY   writes this reference's logits.
#
# Layouts read:
#   release    thinkingmachines/Inkling as published (model.llm.* names; every fused gate/up
#              tensor interleaves its rows gate 0, up 0, gate 1, up 1, ...)
#   container  the names c/inkling.c loads (model.layers.*, lm_head), as colibri-inkling writes
#              them: routed experts fused per layer, U8 1-D with a ".qs" F32 scale per row,
#              int8 (two's complement, D bytes a row) or int4 (D/2 bytes a row, offset-binary,
#              low nibble the even column), gate rows then up rows per expert; or float 3-D
#              [E, 2I, D] / [E, D, I] as transformers saves them. With a dense-int4g64/
#              directory beside the shards, every resident matrix found there as U8 / I8 + ".qs" is
#              read from it as load_w_quant does: int8 per row when its bytes equal the element
#              count, else int4 in groups of 64 along the row (ceil(I/2) bytes a row, nibble - 8).
# The audio and vision towers and the MTP head are not part of the text model.
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_grad_enabled(False)

TOLERANCE = 1e-5


class RefError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def decode_float(dtype, raw, shape, where):
    if dtype == "F32":
        v = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        v = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise RefError(f"{where}: dtype {dtype} is not a float this reference reads")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if v.size != n:
        raise RefError(f"{where}: {v.size} elements for shape {shape}")
    return v.astype(np.float32).reshape(shape)


def read_dir(d):
    """{name: (dtype, shape, bytes)} of every *.safetensors file directly in d."""
    out = {}
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            if name in out:
                raise RefError(f"{path}: tensor {name} appears in more than one file")
            a, b = t["data_offsets"]
            out[name] = (t["dtype"], list(t["shape"]), data[base + a:base + b])
    return out


def int_rows(raw, scales, rows, cols, where):
    """A container's per-row int8 or int4 rows, by their byte count, times the row scales."""
    q = np.frombuffer(raw, dtype=np.uint8)
    if scales.size != rows:
        raise RefError(f"{where}: {scales.size} scales for {rows} rows")
    if q.size == rows * cols:
        v = q.view(np.int8).astype(np.float32).reshape(rows, cols)
    elif cols % 2 == 0 and q.size == rows * cols // 2:
        b = q.reshape(rows, cols // 2)
        v = np.empty((rows, cols), dtype=np.float32)
        v[:, 0::2] = (b & 0xF).astype(np.float32) - 8
        v[:, 1::2] = (b >> 4).astype(np.float32) - 8
    else:
        raise RefError(f"{where}: {q.size} bytes fit neither int8 nor int4 rows of "
                       f"[{rows}, {cols}]")
    return v * scales.reshape(rows, 1)


def overlay_rows(raw, scales, rows, cols, where):
    """convert_inkling_dense_int4.py's matrices as inkling.c's load_w_quant tells them apart."""
    q = np.frombuffer(raw, dtype=np.uint8)
    if q.size == rows * cols and scales.size * 64 < q.size:
        if scales.size != rows:
            raise RefError(f"{where}: int8 rows need {rows} scales, not {scales.size}")
        return q.view(np.int8).astype(np.float32).reshape(rows, cols) * scales.reshape(rows, 1)
    rb, ng = (cols + 1) // 2, (cols + 63) // 64
    if q.size != rows * rb or scales.size != rows * ng:
        raise RefError(f"{where}: {q.size} bytes, {scales.size} scales fit no layout of "
                       f"[{rows}, {cols}]")
    b = q.reshape(rows, rb)
    codes = np.empty((rows, 2 * rb), dtype=np.float32)
    codes[:, 0::2] = (b & 0xF).astype(np.float32) - 8
    codes[:, 1::2] = (b >> 4).astype(np.float32) - 8
    s = np.repeat(scales.reshape(rows, ng), 64, axis=1)[:, :cols]
    return codes[:, :cols] * s


class Weights:
    def __init__(self, d):
        self.raw = read_dir(d)
        if not self.raw:
            raise RefError(f"{d}: no .safetensors files")
        self.release = "model.llm.embed.weight" in self.raw
        od = os.path.join(d, "dense-int4g64")
        self.overlay = read_dir(od) if os.path.isdir(od) and not self.release else {}

    def has(self, name):
        return name in self.raw

    def floats(self, name, shape=None):
        if name not in self.raw:
            raise RefError(f"missing tensor {name}")
        dtype, sh, raw = self.raw[name]
        v = decode_float(dtype, raw, sh, name)
        if shape is not None:
            if v.size != int(np.prod(shape)):
                raise RefError(f"{name} has shape {sh}, expected {list(shape)}")
            v = v.reshape(shape)
        return v

    def matrix(self, name, rows, cols):
        """A resident matrix [rows, cols] (3-D tensors flattened), from the overlay when it holds
        it, else as stored."""
        if name in self.overlay and name + ".qs" in self.overlay:
            dtype, _, raw = self.overlay[name]
            if dtype not in ("U8", "I8"):
                raise RefError(f"dense-int4g64: {name} is {dtype}, not U8 or I8")
            sd, ss, sraw = self.overlay[name + ".qs"]
            s = decode_float(sd, sraw, ss, name + ".qs").reshape(-1)
            return overlay_rows(raw, s, rows, cols, name)
        return self.floats(name, (rows, cols))

    def experts(self, name, e_count, rows, cols):
        """Routed experts [E, rows, cols], float or a container's U8 + .qs rows."""
        if name not in self.raw:
            raise RefError(f"missing tensor {name}")
        dtype, _, raw = self.raw[name]
        if dtype in ("U8", "I8"):
            s = self.floats(name + ".qs").reshape(-1)
            return int_rows(raw, s, e_count * rows, cols, name).reshape(e_count, rows, cols)
        return self.floats(name, (e_count, rows, cols))


def deinterleave(w):
    """[..., 2I, D] rows g0, u0, g1, u1, ... -> gate [..., I, D], up [..., I, D]."""
    return w[..., 0::2, :], w[..., 1::2, :]


# ---------------------------------------------------------------------------------------------
# Config (load_cfg)
# ---------------------------------------------------------------------------------------------

class Config:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            top = json.load(f)
        c = top["text_config"] if isinstance(top.get("text_config"), dict) else top
        g = lambda k, dflt: c[k] if isinstance(c.get(k), (int, float)) else dflt
        self.hidden = g("hidden_size", 6144)
        self.layers = g("num_hidden_layers", 66)
        self.vocab = g("vocab_size", 201024)
        self.unpad = g("unpadded_vocab_size", self.vocab)
        self.heads, self.kv, self.hd = (g("num_attention_heads", 64), g("num_key_value_heads", 8),
                                        g("head_dim", 128))
        self.swa_heads = g("swa_num_attention_heads", self.heads)
        self.swa_kv = g("swa_num_key_value_heads", 16)
        self.swa_hd = g("swa_head_dim", self.hd)
        self.window = g("sliding_window_size", 512)
        self.d_rel, self.rel_extent = g("d_rel", 16), g("rel_extent", 1024)
        self.log_floor = g("log_scaling_n_floor", 0)
        self.log_alpha = g("log_scaling_alpha", 0.1)
        self.conv_k = g("sconv_kernel_size", g("conv_kernel_size", 4))
        self.experts, self.topk = g("n_routed_experts", 256), g("num_experts_per_tok", 6)
        self.shared = g("n_shared_experts", 2)
        self.eps = g("rms_norm_eps", 1e-6)
        self.route_scale = g("route_scale", 8.0)
        self.mup = g("logits_mup_width_multiplier", 24.0)
        if isinstance(c.get("dense_intermediate_size"), (int, float)):
            self.dense_inter = c["dense_intermediate_size"]
            self.moe_inter = g("intermediate_size", 3072)
        else:
            self.dense_inter = g("intermediate_size", 24576)
            self.moe_inter = g("moe_intermediate_size", 3072)
        lt, ll = c.get("layer_types"), c.get("local_layer_ids")
        if isinstance(lt, list):
            self.local = [t == "hybrid_sliding" for t in lt]
        elif isinstance(ll, list):
            self.local = [i in ll for i in range(self.layers)]
        else:
            self.local = [(i + 1) % 6 != 0 for i in range(self.layers)]
        mt = c.get("mlp_layer_types")
        if isinstance(mt, list):
            self.sparse = [t == "sparse" for t in mt]
        else:
            dense = g("dense_mlp_idx", 0)
            self.sparse = [i >= dense for i in range(self.layers)]
        if c.get("hidden_act", "silu") != "silu":
            raise RefError(f"hidden_act {c['hidden_act']!r}: the runtime computes silu only")


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    # rmsnorm_row: x / sqrt(mean(x^2) + eps) * w, the mean of squares in double.
    ms = x.double().pow(2).mean(-1, keepdim=True).float()
    return x * (1.0 / torch.sqrt(ms + eps)) * w


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


class ShortConv:
    """sconv_apply: depthwise causal conv of kernel K over [T, C], the input added back; the
    history (the last K - 1 raw inputs) carries over between calls, zero at the start."""

    def __init__(self, w):
        self.w = w.reshape(w.shape[0], -1)  # [C, K]
        self.hist = torch.zeros(self.w.shape[1] - 1, self.w.shape[0])

    def __call__(self, x):
        k = self.w.shape[1]
        col = torch.cat([self.hist, x], dim=0)  # [K - 1 + T, C]
        out = torch.stack([(col[i:i + k] * self.w.T).sum(0) for i in range(x.shape[0])]) + x
        self.hist = col[col.shape[0] - (k - 1):].clone()
        return out


class Layer:
    pass


class Model:
    def __init__(self, d):
        self.c = c = Config(d)
        w = Weights(d)
        D, rel = c.hidden, w.release
        self.embed = w.floats("model.llm.embed.weight" if rel else "model.embed_tokens.weight",
                              (c.vocab, D))
        if rel:
            self.embed_norm = w.floats("model.llm.embed_norm.weight", (D,))
        elif w.has("model.embed_norm.weight"):
            self.embed_norm = w.floats("model.embed_norm.weight", (D,))
        else:
            self.embed_norm = None
        self.final_norm = w.floats("model.llm.norm.weight" if rel else "model.norm.weight", (D,))
        lm = "model.llm.unembed.weight" if rel else "lm_head.weight"
        self.lm_head = w.matrix(lm, c.vocab, D)[:c.unpad]
        if not rel and "model.embed_tokens.weight" in w.overlay:
            self.embed = w.matrix("model.embed_tokens.weight", c.vocab, D)
        self.embed, self.lm_head = t(self.embed), t(self.lm_head)
        self.embed_norm = None if self.embed_norm is None else t(self.embed_norm)
        self.final_norm = t(self.final_norm)
        self.weights = w
        self.layer = [self.load_layer(i) for i in range(c.layers)]

    def load_layer(self, i):
        c, w = self.c, self.weights
        D, local = c.hidden, c.local[i]
        H = c.swa_heads if local else c.heads
        KV = c.swa_kv if local else c.kv
        hd = c.swa_hd if local else c.hd
        ext = c.window if local else c.rel_extent
        L = Layer()
        L.local, L.H, L.KV, L.hd, L.ext = local, H, KV, hd, ext
        if w.release:
            p = f"model.llm.layers.{i}."
            n = {"in": "attn_norm.weight", "post": "mlp_norm.weight", "q": "attn.wq_du.weight",
                 "k": "attn.wk_dv.weight", "v": "attn.wv_dv.weight", "r": "attn.wr_du.weight",
                 "o": "attn.wo_ud.weight", "qn": "attn.q_norm.weight", "kn": "attn.k_norm.weight",
                 "relp": "attn.rel_logits_proj.proj", "kc": "attn.k_sconv.weight",
                 "vc": "attn.v_sconv.weight", "ac": "attn_sconv.weight", "mc": "mlp_sconv.weight"}
        else:
            p = f"model.layers.{i}."
            n = {"in": "input_layernorm.weight", "post": "post_attention_layernorm.weight",
                 "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
                 "v": "self_attn.v_proj.weight", "r": "self_attn.r_proj.weight",
                 "o": "self_attn.o_proj.weight", "qn": "self_attn.q_norm.weight",
                 "kn": "self_attn.k_norm.weight", "relp": "self_attn.rel_logits_proj.proj",
                 "kc": "self_attn.k_sconv.conv1d.weight", "vc": "self_attn.v_sconv.conv1d.weight",
                 "ac": "attn_sconv.conv1d.weight", "mc": "mlp_sconv.conv1d.weight"}
        f = lambda k, shape: t(w.floats(p + n[k], shape))
        m = lambda k, rows, cols: t(w.matrix(p + n[k], rows, cols))
        L.in_norm, L.post_norm = f("in", (D,)), f("post", (D,))
        L.q, L.k, L.v = m("q", H * hd, D), m("k", KV * hd, D), m("v", KV * hd, D)
        L.r, L.o = m("r", H * c.d_rel, D), m("o", D, H * hd)
        L.qn, L.kn = f("qn", (hd,)), f("kn", (hd,))
        L.relp = f("relp", (c.d_rel, ext))
        L.kc, L.vc = f("kc", (KV * hd, c.conv_k)), f("vc", (KV * hd, c.conv_k))
        L.ac, L.mc = f("ac", (D, c.conv_k)), f("mc", (D, c.conv_k))
        L.sparse = c.sparse[i]
        if not L.sparse:
            I = c.dense_inter
            if w.release:
                g, u = deinterleave(w.floats(p + "mlp.w13_dn.weight", (2 * I, D)))
                L.dg, L.du = t(g), t(u)
                L.dd = t(w.floats(p + "mlp.w2_md.weight", (D, I)))
                gs = p + "mlp.global_scale"
            else:
                L.dg = t(w.matrix(p + "mlp.gate_proj.weight", I, D))
                L.du = t(w.matrix(p + "mlp.up_proj.weight", I, D))
                L.dd = t(w.matrix(p + "mlp.down_proj.weight", D, I))
                gs = p + "mlp.global_scale"
            L.dgs = float(w.floats(gs, (1,))[0]) if w.has(gs) else 1.0
            return L
        E, S, I = c.experts, c.shared, c.moe_inter
        if w.release:
            L.router = t(w.floats(p + "mlp.gate.weight", (E + S, D)))
            L.bias = t(w.floats(p + "mlp.gate.bias", (E,)))
            gs = p + "mlp.gate.global_scale"
            g, u = deinterleave(w.floats(p + "mlp.experts.w13_weight", (E, 2 * I, D)))
            L.eg, L.eu = t(g), t(u)
            L.ed = t(w.floats(p + "mlp.experts.w2_weight", (E, D, I)))
            g, u = deinterleave(w.floats(p + "mlp.shared_experts.shared_w13_weight", (S, 2 * I, D)))
            L.sg, L.su = t(g), t(u)
            L.sd = t(w.floats(p + "mlp.shared_experts.shared_w2_weight", (S, D, I)))
        else:
            L.router = t(w.floats(p + "mlp.gate.weight", (E + S, D)))
            L.bias = t(w.floats(p + "mlp.gate.e_score_correction_bias", (E,)))
            gs = p + "mlp.gate.global_scale"
            gu = w.experts(p + "mlp.experts.gate_up_proj", E, 2 * I, D)
            L.eg, L.eu = t(gu[:, :I]), t(gu[:, I:])
            L.ed = t(w.experts(p + "mlp.experts.down_proj", E, D, I))
            L.sg = t(w.matrix(p + "mlp.shared_experts.gate_proj", S * I, D).reshape(S, I, D))
            L.su = t(w.matrix(p + "mlp.shared_experts.up_proj", S * I, D).reshape(S, I, D))
            L.sd = t(w.matrix(p + "mlp.shared_experts.down_proj", S * D, I).reshape(S, D, I))
        L.rgs = float(w.floats(gs, (1,))[0]) if w.has(gs) else 1.0
        return L

    def new_state(self):
        st = {"pos": 0, "kv": [], "conv": []}
        for L in self.layer:
            st["kv"].append((torch.zeros(0, L.KV, L.hd), torch.zeros(0, L.KV, L.hd)))
            st["conv"].append([ShortConv(L.kc), ShortConv(L.vc), ShortConv(L.ac), ShortConv(L.mc)])
        return st

    def attention(self, L, x, kv, convs, pos0):
        c, T = self.c, x.shape[0]
        q = (x @ L.q.T).view(T, L.H, L.hd)
        k = convs[0](x @ L.k.T).view(T, L.KV, L.hd)
        v = convs[1](x @ L.v.T).view(T, L.KV, L.hd)
        r = (x @ L.r.T).view(T, L.H, c.d_rel)
        q, k = rms_norm(q, L.qn, c.eps), rms_norm(k, L.kn, c.eps)
        K, V = torch.cat([kv[0], k]), torch.cat([kv[1], v])
        rl = r @ L.relp                                            # [T, H, ext]
        group = L.H // L.KV
        ctx = torch.zeros(T, L.H, L.hd)
        for s in range(T):
            pos = pos0 + s
            t0 = max(0, pos - c.window + 1) if L.local else 0
            tau = 1.0
            if not L.local and c.log_floor > 0:
                en = (pos + 1) / c.log_floor
                if en > 1.0:
                    # 1 + alpha * (float)log(en), in f32
                    tau = float(np.float32(1.0) + np.float32(c.log_alpha)
                                * np.float32(math.log(en)))
            keys = torch.arange(t0, pos + 1)
            dist = pos - keys
            for h in range(L.H):
                g = h // group
                score = (K[t0:pos + 1, g] @ q[s, h]) * (1.0 / L.hd)
                bias = torch.where(dist < L.ext, rl[s, h][dist.clamp(max=L.ext - 1)],
                                   torch.zeros(()))
                p = torch.softmax(tau * (score + bias), dim=0)
                ctx[s, h] = p @ V[t0:pos + 1, g]
        return ctx.reshape(T, -1) @ L.o.T, (K, V)

    def moe(self, L, x):
        c = self.c
        E, K, S = c.experts, c.topk, c.shared
        logits = x @ L.router.T
        out = torch.zeros_like(x)
        for s in range(x.shape[0]):
            lg = logits[s]
            choice = torch.sigmoid(lg[:E]) + L.bias
            # top-K, ties to the lower index (a stable sort of the negated scores)
            order = torch.sort(-choice, stable=True)[1][:K].tolist()
            w = torch.cat([torch.sigmoid(lg[order]), torch.sigmoid(lg[E:E + S])])
            w = w * (c.route_scale * L.rgs / w.sum())
            xs = x[s]
            for kk, e in enumerate(order):
                hh = (F.silu(L.eg[e] @ xs) * (L.eu[e] @ xs)) @ L.ed[e].T
                out[s] += w[kk] * hh
            for j in range(S):
                hh = (F.silu(L.sg[j] @ xs) * (L.su[j] @ xs)) @ L.sd[j].T
                out[s] += w[K + j] * hh
        return out

    def forward(self, ids, st):
        c = self.c
        x = self.embed[torch.tensor(ids)]
        if self.embed_norm is not None:
            x = rms_norm(x, self.embed_norm, c.eps)
        for i, L in enumerate(self.layer):
            convs = st["conv"][i]
            a, st["kv"][i] = self.attention(L, rms_norm(x, L.in_norm, c.eps), st["kv"][i], convs,
                                            st["pos"])
            x = x + convs[2](a)
            n = rms_norm(x, L.post_norm, c.eps)
            if L.sparse:
                m = self.moe(L, n)
            else:
                m = ((F.silu(n @ L.dg.T) * (n @ L.du.T)) @ L.dd.T) * L.dgs
            x = x + convs[3](m)
        st["pos"] += len(ids)
        h = rms_norm(x, self.final_norm, c.eps) / c.mup
        return h @ self.lm_head.T

    def logits(self, ids):
        return self.forward(list(ids), self.new_state())

    def greedy(self, prompt, n):
        st = self.new_state()
        last = self.forward(list(prompt), st)[-1]
        out = []
        for i in range(n):
            tok = int(np.argmax(last.numpy()))
            out.append(tok)
            if i + 1 < n:
                last = self.forward([tok], st)[-1]
        return out


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

USAGE = ("usage: inkling_forward.py CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY\n"
         "       inkling_forward.py --logits CKPT_DIR FULL_IDS OUT_NPY")


def parse_ids(s, vocab):
    try:
        ids = [int(x) for x in s.split(",") if x.strip() != ""]
    except ValueError:
        raise RefError(f"FULL_IDS {s!r} is not a comma-separated list of integers")
    if not ids or any(not 0 <= i < vocab for i in ids):
        raise RefError(f"FULL_IDS must be non-empty ids below {vocab}")
    return ids


def check(model, full, prompt_len, given_path):
    ok = True
    ref = model.logits(full).numpy().astype(np.float32)
    try:
        given = np.load(given_path)
    except (OSError, ValueError) as e:
        raise RefError(f"{given_path}: not a readable .npy ({e})")
    if given.shape != ref.shape:
        print(f"logits: FAIL shape {list(given.shape)} given, {list(ref.shape)} expected")
        return False
    given = given.astype(np.float32)
    if not np.isfinite(given).all():
        print("logits: FAIL non-finite values given")
        return False
    scale = float(np.abs(ref).max())
    diff = np.abs(ref - given)
    rel = float(diff.max()) / scale if scale > 0 else float(diff.max())
    if rel <= TOLERANCE:
        print(f"logits: ok {ref.shape[0]} positions x {ref.shape[1]} vocab, max diff {rel:.3e} "
              f"relative (<= {TOLERANCE:g})")
    else:
        at = np.unravel_index(int(np.argmax(diff)), diff.shape)
        print(f"logits: FAIL max diff {rel:.3e} relative > {TOLERANCE:g} at position {at[0]} "
              f"token {at[1]} (ref {ref[at]:.6g}, given {given[at]:.6g})")
        ok = False
    ra, ga = np.argmax(ref, axis=-1), np.argmax(given, axis=-1)
    differ = np.nonzero(ra != ga)[0]
    if differ.size == 0:
        print(f"argmax: ok identical at all {len(ra)} positions")
    else:
        p = int(differ[0])
        print(f"argmax: FAIL {differ.size} positions differ, first at {p} (ref {int(ra[p])}, "
              f"given {int(ga[p])})")
        ok = False
    n = len(full) - prompt_len
    seq = model.greedy(full[:prompt_len], n) if n > 0 else []
    if seq == full[prompt_len:]:
        print(f"greedy: ok {n} tokens after a {prompt_len}-token prompt identical")
    else:
        i = next(i for i in range(n) if seq[i] != full[prompt_len + i])
        print(f"greedy: FAIL first differing token at position {prompt_len + i} (ref {seq[i]}, "
              f"FULL_IDS {full[prompt_len + i]})")
        ok = False
    return ok


def main(argv):
    logits_mode = "--logits" in argv
    args = [a for a in argv if a != "--logits"]
    if any(a.startswith("--") for a in args) or len(args) != (3 if logits_mode else 4):
        print(USAGE, file=sys.stderr)
        return 1
    try:
        model = Model(args[0])
        full = parse_ids(args[1], model.c.vocab)
        if logits_mode:
            np.save(args[2], model.logits(full).numpy().astype(np.float32))
            return 0
        try:
            prompt_len = int(args[2])
        except ValueError:
            raise RefError(f"PROMPT_LEN {args[2]!r} is not an integer")
        if not 1 <= prompt_len <= len(full):
            raise RefError(f"PROMPT_LEN {prompt_len} is outside 1..{len(full)}")
        return 0 if check(model, full, prompt_len, args[3]) else 1
    except RefError as e:
        print(f"inkling_forward: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
