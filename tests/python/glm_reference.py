# An independent GLM-MoE-DSA / DeepSeek-V3 forward pass in torch (f32), written from
# transformers' modeling_glm_moe_dsa.py semantics, with its own safetensors reader and its own
# decoders (FP8 E4M3 block-scaled, BF16, F32, and the engine's int8-row / int4 containers:
# reference/colibri.md §1.5). Checks qrepack's oracle for the checkpoint:
#   glm_reference.py CKPT_DIR REF_JSON LOGITS_NPY
# - logits of the teacher-forced pass over full_ids within 1e-4 (max abs diff / max abs);
# - identical argmax at every position (tf_pred);
# - the greedy continuation of prompt_ids, recomputed here token by token.
import json
import os
import struct
import sys

import numpy as np
import torch

from st_formats import e4m3_table

torch.set_grad_enabled(False)


E4M3 = e4m3_table()


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[base + a:base + b]
        dt, shape = t["dtype"], t["shape"]
        if dt == "F32":
            v = np.frombuffer(raw, dtype="<f4").reshape(shape)
        elif dt == "BF16":
            v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            v = v.reshape(shape)
        elif dt == "F8_E4M3":
            v = E4M3[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
        elif dt in ("U8", "I8"):
            v = np.frombuffer(raw, dtype=np.uint8).reshape(shape)
        else:
            raise SystemExit(f"{path}: {name}: dtype {dt} not handled by the test reader")
        out[name] = (dt, v)
    return out


def read_dir(d):
    tensors = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(d, f)))
    return tensors


class Weights:
    def __init__(self, d):
        self.t = read_dir(d)

    def get(self, name, rows, cols):
        if name + ".qs" in self.t:
            return self.container(name, rows, cols)
        dt, v = self.t[name]
        v = v.astype(np.float32)
        if name + "_scale_inv" in self.t:
            s = self.t[name + "_scale_inv"][1]
            r, c = v.shape
            full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:r, :c]
            v = (v * full).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(v.reshape(rows, cols)))

    def container(self, name, rows, cols):
        codes = self.t[name][1].reshape(-1)
        qs = self.t[name + ".qs"][1].reshape(-1)
        if codes.size == rows * cols:  # int8-row: two's complement bytes
            q = codes.view(np.int8).astype(np.float32).reshape(rows, cols)
            return torch.from_numpy(q * qs[:, None])
        rb = (cols + 1) // 2
        assert codes.size == rows * rb, name
        b = codes.reshape(rows, rb)
        q = np.empty((rows, rb * 2), dtype=np.float32)
        q[:, 0::2] = (b & 15).astype(np.float32) - 8  # low nibble: the even element
        q[:, 1::2] = (b >> 4).astype(np.float32) - 8
        q = q[:, :cols]
        ng = qs.size // rows
        g = cols if ng == 1 else -(-cols // ng)
        for gs in (16, 32, 48, 64, 96, 128, 192, 256):  # the engine's detect_group_size
            if ng > 1 and -(-cols // gs) == ng:
                g = gs
                break
        scale = np.repeat(qs.reshape(rows, ng), g, axis=1)[:, :cols]
        return torch.from_numpy((q * scale).astype(np.float32))


def rms(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate(x, cos, sin):
    # Interleaved pairs (x[2i], x[2i+1]) rotate by angle i (GLM-MoE-DSA, as the engine does):
    # written here as complex multiplication, a different route from qrepack's.
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    z = torch.complex(pairs[..., 0], pairs[..., 1])
    half = cos.shape[-1] // 2
    w = torch.complex(cos[..., :half], sin[..., :half])
    r = z * w
    # Stored as evens then odds, like transformers' apply_rotary_pos_emb_interleave; q and k
    # share the order, so their dot products are the interleaved rotation's.
    return torch.cat((r.real, r.imag), dim=-1)


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        self.w = Weights(d)

    def vec(self, name, n):
        return self.w.get(name, 1, n).reshape(n)

    def lin(self, x, name, o, i):
        return x @ self.w.get(name, o, i).T

    def attention(self, p, x):
        c = self.c
        T, d, H = x.shape[0], c["hidden_size"], c["num_attention_heads"]
        nope, rd, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        qk, kvr, ql = nope + rd, c["kv_lora_rank"], c["q_lora_rank"]
        qa = rms(self.lin(x, p + "self_attn.q_a_proj.weight", ql, d),
                 self.vec(p + "self_attn.q_a_layernorm.weight", ql), c["rms_norm_eps"])
        q = self.lin(qa, p + "self_attn.q_b_proj.weight", H * qk, ql).view(T, H, qk)
        kv = self.lin(x, p + "self_attn.kv_a_proj_with_mqa.weight", kvr + rd, d)
        latent = rms(kv[:, :kvr], self.vec(p + "self_attn.kv_a_layernorm.weight", kvr),
                     c["rms_norm_eps"])
        kvb = self.lin(latent, p + "self_attn.kv_b_proj.weight", H * (nope + vd), kvr)
        kvb = kvb.view(T, H, nope + vd)
        theta = c["rope_parameters"]["rope_theta"]
        inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
        freqs = torch.arange(T).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q_pe = rotate(q[:, :, nope:], cos[:, None, :], sin[:, None, :])
        k_pe = rotate(kv[:, kvr:], cos, sin)
        qf = torch.cat((q[:, :, :nope], q_pe), dim=-1).transpose(0, 1)  # [H, T, qk]
        kf = torch.cat((kvb[:, :, :nope], k_pe[:, None, :].expand(T, H, rd)), dim=-1)
        kf = kf.transpose(0, 1)
        v = kvb[:, :, nope:].transpose(0, 1)
        scores = (qf @ kf.transpose(1, 2)) * qk ** -0.5
        mask = torch.full((T, T), float("-inf")).triu(1)
        probs = torch.softmax(scores + mask, dim=-1, dtype=torch.float32)
        out = (probs @ v).transpose(0, 1).reshape(T, H * vd)
        return self.lin(out, p + "self_attn.o_proj.weight", d, H * vd)

    def mlp(self, p, x, inter):
        d = self.c["hidden_size"]
        g = self.lin(x, p + "gate_proj.weight", inter, d)
        u = self.lin(x, p + "up_proj.weight", inter, d)
        return self.lin(torch.nn.functional.silu(g) * u, p + "down_proj.weight", d, inter)

    def moe(self, p, x):
        c = self.c
        E, d, k = c["n_routed_experts"], c["hidden_size"], c["num_experts_per_tok"]
        ng, kg = c["n_group"], c["topk_group"]
        scores = torch.sigmoid(self.lin(x, p + "mlp.gate.weight", E, d))
        choice = scores + self.vec(p + "mlp.gate.e_score_correction_bias", E)
        gs = choice.view(-1, ng, E // ng).topk(2, dim=-1)[0].sum(-1)
        gidx = gs.topk(kg, dim=-1)[1]
        gmask = torch.zeros_like(gs).scatter_(1, gidx, 1.0)
        smask = gmask[:, :, None].expand(-1, ng, E // ng).reshape(-1, E)
        idx = choice.masked_fill(smask == 0, float("-inf")).topk(k, dim=-1)[1]
        wts = scores.gather(1, idx)
        if c["norm_topk_prob"]:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c["routed_scaling_factor"]
        out = torch.zeros_like(x)
        for e in range(E):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            y = self.mlp(f"{p}mlp.experts.{e}.", x[tok], c["moe_intermediate_size"])
            out.index_add_(0, tok, y * wts[tok, slot, None])
        shared = self.mlp(p + "mlp.shared_experts.", x,
                          c["moe_intermediate_size"] * c["n_shared_experts"])
        return out + shared

    def logits(self, ids):
        c = self.c
        d, V = c["hidden_size"], c["vocab_size"]
        h = self.w.get("model.embed_tokens.weight", V, d)[torch.tensor(ids)]
        eps = c["rms_norm_eps"]
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = h + self.attention(p, rms(h, self.vec(p + "input_layernorm.weight", d), eps))
            x = rms(h, self.vec(p + "post_attention_layernorm.weight", d), eps)
            if l < c["first_k_dense_replace"]:
                h = h + self.mlp(p + "mlp.", x, c["intermediate_size"])
            else:
                h = h + self.moe(p, x)
        h = rms(h, self.vec("model.norm.weight", d), eps)
        return self.lin(h, "lm_head.weight", V, d)


def main():
    ckpt, ref_path, logits_path = sys.argv[1:4]
    model = Model(ckpt)
    with open(ref_path) as f:
        ref = json.load(f)
    full, prompt = ref["full_ids"], ref["prompt_ids"]
    ours = torch.from_numpy(np.load(logits_path))
    theirs = model.logits(full)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    rel = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    assert rel <= 1e-4, f"logits differ by {rel:.3g} relative"
    tf = theirs.argmax(-1).tolist()
    assert tf == ref["tf_pred"], f"tf_pred differs:\n{tf}\n{ref['tf_pred']}"
    seq = list(prompt)
    for _ in range(len(full) - len(prompt)):
        seq.append(int(model.logits(seq)[-1].argmax()))
    assert seq == full, f"greedy continuation differs:\n{seq}\n{full}"
    print(f"ok: {len(full)} positions, logits within {rel:.2e} relative, "
          f"{len(full) - len(prompt)} greedy tokens identical")


main()
