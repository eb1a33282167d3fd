# An independent Kimi K3 forward pass in torch (CPU, float32), written from what the runtime
# computes (upstream c/kimi_k3.c, whose structure docs/model.md and reference/colibri-engines.md
# §1.12 describe), not from qrepack's C++. It steps token by token like the runtime does: a
# recurrent state per KDA layer, a latent cache per MLA layer, the AttnRes block list per token;
# qrepack's pass runs layer by layer over whole sequences instead.
#
#   kimi_k3_forward.py CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY
#     FULL_IDS: comma-separated ids; LOGITS_NPY: f32 [len(FULL_IDS), vocab], row t the logits
#     after token t (teacher-forced). Checks, one line each:
#     - logits: max|ref - given| / max|ref| <= 1e-5;
#     - argmax: identical at every position;
#     - greedy: the greedy continuation of FULL_IDS[:PROMPT_LEN] (argmax, first index on ties),
#       continued from the prompt's state, equals FULL_IDS[PROMPT_LEN:].
#     Exit 0 when all pass, 1 otherwise.
#   kimi_k3_forward.py --logits CKPT_DIR FULL_IDS OUT_NPY   writes this reference's logits.
#   kimi_k3_forward.py --expand-experts SRC DST   a copy of SRC whose routed experts are BF16
#     "<p>.weight" [O, I], this file's MXFP4 decoding of "<p>.weight_packed" / "weight_scale"
#     (every value an e2m1 level times a power of two, so BF16 holds it exactly): the same model.
#
# Weights: BF16 / F16 / F32 tensors; routed experts as compressed-tensors MXFP4
# (<p>.weight_packed U8 [O, I/2] + <p>.weight_scale U8 [O, I/32]: e2m1 of the nibble, element
# 2k in the low nibble, times 2^(e - 127)) or as a float <p>.weight; colibri-kimi-k3's container
# tensors (U8 <name> + F32 <name>.qs: int8 per row, or int4-g64 offset-binary with the even
# column in the low nibble), told apart by their byte counts as kimi_k3.c's w_load does.
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from forward_check import check_against

torch.set_grad_enabled(False)

TOLERANCE = 1e-5
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


class RefError(Exception):
    pass


def read_dir(d):
    """{name: (dtype, shape, bytes)} over every .safetensors file of d."""
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
            if name in out:
                raise RefError(f"{name} is stored twice")
            a, b = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], data[8 + n + a:8 + n + b])
    return out


def floats(dtype, raw):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").astype(np.float32)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float32)
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    raise RefError(f"dtype {dtype} is not a float")


def mxfp4(packed, scale, rows, cols):
    """Decodes one MXFP4 matrix: 16 e2m1 codes -> values, each 32-column group times 2^(e-127)."""
    table = np.array(E2M1 + [-v for v in E2M1], dtype=np.float64)
    b = np.frombuffer(packed, np.uint8).reshape(rows, cols // 2)
    codes = np.stack([b & 15, b >> 4], axis=-1).reshape(rows, cols)  # low nibble first
    e = np.frombuffer(scale, np.uint8).reshape(rows, cols // 32).astype(np.int64)
    if (e == 255).any():
        raise RefError("an E8M0 scale of 255 (NaN)")
    mult = np.repeat(np.power(2.0, e - 127), 32, axis=1)
    return (table[codes] * mult).astype(np.float32)


class Weights:
    def __init__(self, d):
        self.t = read_dir(d)
        probe = "model.layers.0.input_layernorm.weight"
        self.pfx = "language_model." if (probe not in self.t and
                                         "language_model." + probe in self.t) else ""
        self.cache = {}

    def vec(self, name, n):
        dt, _, raw = self.t[self.pfx + name]
        v = floats(dt, raw)
        if v.size != n:
            raise RefError(f"{name}: {v.size} values, expected {n}")
        return torch.from_numpy(v.copy())

    def vec_at_least(self, name, n):
        dt, _, raw = self.t[self.pfx + name]
        v = floats(dt, raw)
        if v.size < n:
            raise RefError(f"{name}: {v.size} values, expected at least {n}")
        return torch.from_numpy(v[:n].copy())

    def mat(self, name, rows, cols):
        key = (name, rows, cols)
        if key in self.cache:
            return self.cache[key]
        n = self.pfx + name
        if n + ".qs" in self.t:
            m = self.container(n, rows, cols)
        elif n.endswith(".weight") and n + "_packed" in self.t:
            m = mxfp4(self.t[n + "_packed"][2], self.t[n[:-len("weight")] + "weight_scale"][2],
                      rows, cols)
        else:
            dt, _, raw = self.t[n]
            m = floats(dt, raw)
            if m.size != rows * cols:
                raise RefError(f"{name}: {m.size} values for [{rows}, {cols}]")
            m = m.reshape(rows, cols)
        out = torch.from_numpy(np.ascontiguousarray(m, dtype=np.float32))
        self.cache[key] = out
        return out

    def container(self, n, rows, cols):
        codes = np.frombuffer(self.t[n][2], np.uint8)
        qs = floats(self.t[n + ".qs"][0], self.t[n + ".qs"][2])
        if codes.size == rows * cols and qs.size == rows:
            return codes.view(np.int8).astype(np.float32).reshape(rows, cols) * qs[:, None]
        if cols % 64 == 0 and codes.size == rows * cols // 2 and qs.size == rows * cols // 64:
            b = codes.reshape(rows, cols // 2)
            q = np.stack([b & 15, b >> 4], axis=-1).reshape(rows, cols).astype(np.float32) - 8
            return q * np.repeat(qs.reshape(rows, cols // 64), 64, axis=1)
        raise RefError(f"{n}: {codes.size} bytes / {qs.size} scales fit neither int8 nor int4-g64")


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def situ(g, u, b1, b2):
    return b1 * torch.tanh(g / b1) * torch.sigmoid(g) * (b2 * torch.tanh(u / b2))


class Model:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        c = cfg.get("text_config", cfg)
        la = c["linear_attn_config"]
        self.c = c
        self.D, self.V, self.L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-5)
        self.b1, self.b2 = c["activation_situ_beta"], c["activation_situ_linear_beta"]
        self.res_bs, self.first_dense = c["attn_res_block_size"], c["first_k_dense_replace"]
        self.kda = {x - 1 for x in la["kda_layers"]}
        self.kh, self.hd, self.ck = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]
        self.lb = la.get("gate_lower_bound", -5.0)
        self.w = Weights(d)

    def lin(self, x, name, o, i):
        return self.w.mat(name, o, i) @ x

    # ---- one token through the stack, updating `st` (per-layer state) -----------------------
    def kda_step(self, p, x, s):
        H, hd, K = self.kh, self.hd, self.ck
        P = H * hd
        qkv = []
        for proj, conv in (("q_proj", "q_conv1d"), ("k_proj", "k_conv1d"), ("v_proj", "v_conv1d")):
            y = self.lin(x, p + proj + ".weight", P, self.D)
            win = s.setdefault(conv, torch.zeros(P, K))
            win = torch.cat((win[:, 1:], y[:, None]), dim=1)  # oldest first, newest last
            s[conv] = win
            taps = self.w.mat(p + conv + ".weight", P, K)
            qkv.append(torch.nn.functional.silu((taps * win).sum(-1)))
        q, k, v = (t.view(H, hd) for t in qkv)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * hd ** -0.5
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        low = self.lin(self.lin(x, p + "f_a_proj.weight", hd, self.D), p + "f_b_proj.weight", P, hd)
        z = (low + self.w.vec(p + "dt_bias", P)).view(H, hd)
        a = torch.exp(self.w.vec_at_least(p + "A_log", H))
        decay = torch.exp(self.lb * torch.sigmoid(a[:, None] * z))  # [H, hd] per key channel
        beta = torch.sigmoid(self.lin(x, p + "b_proj.weight", H, self.D))
        S = s.setdefault("S", torch.zeros(H, hd, hd))  # [head, key, value]
        S = S * decay[:, :, None]
        err = (v - torch.einsum("hk,hkv->hv", k, S)) * beta[:, None]
        S = S + k[:, :, None] * err[:, None, :]
        s["S"] = S
        o = torch.einsum("hk,hkv->hv", q, S)
        o = rms(o, self.w.vec(p + "o_norm.weight", hd), self.eps)
        o = o * torch.sigmoid(self.lin(x, p + "g_proj.weight", P, self.D).view(H, hd))
        return self.lin(o.reshape(P), p + "o_proj.weight", self.D, P)

    def mla_step(self, p, x, s):
        c = self.c
        H, nope, rope, vd = (c["num_attention_heads"], c["qk_nope_head_dim"],
                             c["qk_rope_head_dim"], c["v_head_dim"])
        kvr, qr = c["kv_lora_rank"], c["q_lora_rank"]
        qa = rms(self.lin(x, p + "q_a_proj.weight", qr, self.D),
                 self.w.vec(p + "q_a_layernorm.weight", qr), self.eps)
        q = self.lin(qa, p + "q_b_proj.weight", H * (nope + rope), qr).view(H, nope + rope)
        kva = self.lin(x, p + "kv_a_proj_with_mqa.weight", kvr + rope, self.D)
        lat = rms(kva[:kvr], self.w.vec(p + "kv_a_layernorm.weight", kvr), self.eps)
        kv = self.lin(lat, p + "kv_b_proj.weight", H * (nope + vd), kvr).view(H, nope + vd)
        s.setdefault("k", []).append(torch.cat((kv[:, :nope], kva[kvr:].expand(H, rope)), -1))
        s.setdefault("v", []).append(kv[:, nope:])
        keys, vals = torch.stack(s["k"], 1), torch.stack(s["v"], 1)  # [H, T, .]; no rope (NoPE)
        w = torch.softmax(torch.einsum("hd,htd->ht", q, keys) * (nope + rope) ** -0.5, dim=-1)
        ctx = torch.einsum("ht,htd->hd", w, vals).reshape(H * vd)
        ctx = ctx * torch.sigmoid(self.lin(x, p + "g_proj.weight", H * vd, self.D))
        return self.lin(ctx, p + "o_proj.weight", self.D, H * vd)

    def moe(self, p, x):
        c = self.c
        E, K, I = c["num_experts"], c["num_experts_per_token"], c["moe_intermediate_size"]
        lat = c["routed_expert_hidden_size"]
        s = torch.sigmoid(self.lin(x, p + "gate.weight", E, self.D))
        choice = s + self.w.vec(p + "gate.e_score_correction_bias", E)
        sel = torch.sort(-choice, stable=True)[1][:K]  # ties: the lower index first
        wts = s[sel] / (s[sel].sum() + 1e-20)
        z = self.lin(x, p + "routed_expert_down_proj.weight", lat, self.D)
        u = torch.zeros(lat)
        for e, we in zip(sel.tolist(), wts):
            ep = f"{p}experts.{e}."
            h = situ(self.lin(z, ep + "w1.weight", I, lat), self.lin(z, ep + "w3.weight", I, lat),
                     self.b1, self.b2)
            u = u + we * self.lin(h, ep + "w2.weight", lat, I)
        u = rms(u, self.w.vec(p + "routed_expert_norm.weight", lat), self.eps)
        y = self.lin(u, p + "routed_expert_up_proj.weight", self.D, lat)
        return y + self.mlp(p + "shared_experts.", x, I * c["num_shared_experts"])

    def mlp(self, p, x, inter):
        h = situ(self.lin(x, p + "gate_proj.weight", inter, self.D),
                 self.lin(x, p + "up_proj.weight", inter, self.D), self.b1, self.b2)
        return self.lin(h, p + "down_proj.weight", self.D, inter)

    def res_mix(self, blocks, last, name_norm, name_proj):
        sw = self.w.vec(name_norm, self.D) * self.w.vec(name_proj, self.D)
        vs = torch.stack(blocks + [last])  # [n, D]; the prefix last
        v64 = vs.double()
        score = (v64 @ sw.double()) / torch.sqrt(v64.pow(2).mean(-1) + self.eps)
        p = torch.softmax(score.float(), dim=0)
        return (p[:, None] * vs).sum(0)

    def step(self, token, state):
        """Logits after `token`; `state` is {"layers": [...], "blocks": [...]}, updated."""
        h = self.w.mat("model.embed_tokens.weight", self.V, self.D)[token].clone()
        blocks = []  # this token's block snapshots
        for i in range(self.L):
            lp = f"model.layers.{i}."
            prefix = h
            if blocks:
                h = self.res_mix(blocks, prefix, lp + "self_attention_res_norm.weight",
                                 lp + "self_attention_res_proj.weight")
            snap = i % self.res_bs == 0
            if snap:
                blocks.append(prefix)
            x = rms(h, self.w.vec(lp + "input_layernorm.weight", self.D), self.eps)
            st = state["layers"][i]
            if i in self.kda:
                a = self.kda_step(lp + "self_attn.", x, st)
            else:
                a = self.mla_step(lp + "self_attn.", x, st)
            prefix = a if snap else prefix + a
            m = self.res_mix(blocks, prefix, lp + "mlp_res_norm.weight", lp + "mlp_res_proj.weight")
            x = rms(m, self.w.vec(lp + "post_attention_layernorm.weight", self.D), self.eps)
            if i < self.first_dense:
                f = self.mlp(lp + "mlp.", x, self.c["intermediate_size"])
            else:
                f = self.moe(lp + "block_sparse_moe.", x)
            h = prefix + f
        m = self.res_mix(blocks, h, "model.output_attn_res_norm.weight",
                         "model.output_attn_res_proj.weight")
        m = rms(m, self.w.vec("model.norm.weight", self.D), self.eps)
        return self.lin(m, "lm_head.weight", self.V, self.D)

    def new_state(self):
        return {"layers": [{} for _ in range(self.L)]}

    def logits(self, ids):
        st = self.new_state()
        return torch.stack([self.step(t, st) for t in ids]), st


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] in data order."""
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, raw in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    js = json.dumps(head, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(t[3] for t in tensors))


def expand_experts(src, dst):
    shutil.copytree(src, dst)
    idx_path = os.path.join(dst, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    expanded = 0
    for f in sorted(os.listdir(dst)):
        if not f.endswith(".safetensors"):
            continue
        t = read_dir_file(os.path.join(dst, f))
        out = []
        for name, (dt, shape, raw) in t.items():
            if name.endswith(".weight_scale") and name[:-len("_scale")] + "_packed" in t:
                del idx["weight_map"][name]
                continue
            if not name.endswith(".weight_packed"):
                out.append((name, dt, shape, raw))
                continue
            base = name[:-len("_packed")]
            rows, cols = shape[0], shape[1] * 2
            v = mxfp4(raw, t[base + "_scale"][2], rows, cols)
            bf = (v.view(np.uint32) >> 16).astype("<u2")
            if not np.array_equal((bf.astype(np.uint32) << 16).view(np.float32), v):
                raise RefError(f"{name}: a decoded value is not exact in BF16")
            out.append((base, "BF16", [rows, cols], bf.tobytes()))
            idx["weight_map"][base] = idx["weight_map"].pop(name)
            expanded += 1
        write_safetensors(os.path.join(dst, f), out)
    json.dump(idx, open(idx_path, "w"), indent=2)
    print(f"expanded {expanded} MXFP4 expert matrices to BF16")
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
    if argv and argv[0] == "--expand-experts":
        return expand_experts(argv[1], argv[2])
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
        print(f"kimi_k3_forward.py: {e}")
        sys.exit(1)
