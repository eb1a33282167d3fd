# An independent reference forward pass, in torch (CPU, float32), of five Hugging Face decoder
# families, written from transformers' modeling code (the function each choice comes from is
# named where it is made), with its own safetensors reader. It cross-checks the logits that
# qrepack's own C++ forward pass writes for a checkpoint:
#
#   decoder_reference.py [--attention-only] CKPT_DIR FULL_IDS PROMPT_LEN LOGITS_NPY
#     FULL_IDS: comma-separated token ids; LOGITS_NPY: f32 [len(FULL_IDS), vocab], row t the
#     logits predicting token t+1, teacher-forced over FULL_IDS. Checks, one line each:
#     - logits: max|ref - given| / max|ref| <= 1e-4;
#     - argmax: identical at every position;
#     - greedy: the greedy continuation of FULL_IDS[:PROMPT_LEN], recomputed here token by token
#       (argmax, first index on ties) with an incremental cache, equals FULL_IDS[PROMPT_LEN:].
#     Exit 0 when all pass, 1 otherwise.
#   decoder_reference.py --logits [--attention-only] CKPT_DIR FULL_IDS OUT_NPY
#     writes this reference's own teacher-forced logits.
#   --attention-only (qwen3_5_moe only): make_qwen36_tiny.py's "attention_only" reference
#     mode: every linear_attention layer is the identity (its mixer and its MLP both
#     contribute zeros; the layer's input passes through unchanged).
#
# Families, by config.json's model_type: llama (LlamaForCausalLM), qwen3 (Qwen3ForCausalLM),
# qwen3_moe (Qwen3MoeForCausalLM), olmoe (OlmoeForCausalLM), qwen3_5_moe
# (Qwen3_5MoeForConditionalGeneration's text model: Gated DeltaNet + gated attention hybrid;
# qwen3_5_moe_text, its text-only config, is read the same way).
# Tensors: F32, F16, BF16, and F8_E4M3 with a "<name>_scale_inv" (F32 or BF16) sidecar of
# 128 x 128 block scales (weight * scale per block); everything is decoded to float32.
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

from st_formats import e4m3_table

torch.set_grad_enabled(False)

TOLERANCE = 1e-4
FAMILIES = ("llama", "qwen3", "qwen3_moe", "olmoe", "qwen3_5_moe", "qwen3_5_moe_text")


class RefError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

E4M3 = e4m3_table()


def decode(dtype, raw, shape, where):
    if dtype == "F32":
        v = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        v = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype == "F8_E4M3":
        v = E4M3[np.frombuffer(raw, dtype=np.uint8)]
    else:
        raise RefError(f"{where}: dtype {dtype} is not read by this reference")
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if v.size != n:
        raise RefError(f"{where}: {v.size} elements for shape {shape}")
    return v.astype(np.float32).reshape(shape)


def read_safetensors(path, out, dtypes):
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
        out[name] = decode(t["dtype"], data[base + a:base + b], t["shape"], f"{path}: {name}")
        dtypes[name] = t["dtype"]


def block_dequantize(w, s, name):
    """w [..., R, C] times its block scales s [..., ceil(R/128), ceil(C/128)]."""
    r, c = w.shape[-2:]
    want = tuple(w.shape[:-2]) + (-(-r // 128), -(-c // 128))
    if tuple(s.shape) != want:
        raise RefError(f"{name}_scale_inv has shape {list(s.shape)}, expected {list(want)}")
    full = np.repeat(np.repeat(s, 128, axis=-2), 128, axis=-1)[..., :r, :c]
    return (w * full).astype(np.float32)


class Weights:
    """Every tensor of the checkpoint decoded to float32; records which ones the model used."""

    IGNORED = ("mtp.", "model.visual.")

    def __init__(self, d):
        raw, dtypes = {}, {}
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        if not files:
            raise RefError(f"{d}: no .safetensors files")
        for f in files:
            read_safetensors(os.path.join(d, f), raw, dtypes)
        self.t = {}
        for name, v in raw.items():
            if name.endswith("_scale_inv"):
                base = name[:-len("_scale_inv")]
                if base not in raw:
                    raise RefError(f"{name} has no tensor {base} to scale")
                continue
            if dtypes[name] == "F8_E4M3":
                if name + "_scale_inv" not in raw:
                    raise RefError(f"{name} is F8_E4M3 without {name}_scale_inv")
                v = block_dequantize(v, raw[name + "_scale_inv"], name)
            elif name + "_scale_inv" in raw:
                raise RefError(f"{name}_scale_inv scales a {dtypes[name]} tensor")
            self.t[name] = torch.from_numpy(np.ascontiguousarray(v))
        self.used = set()

    def has(self, name):
        return name in self.t

    def get(self, name, shape=None):
        if name not in self.t:
            raise RefError(f"missing tensor {name}")
        v = self.t[name]
        if shape is not None and tuple(v.shape) != tuple(shape):
            raise RefError(f"{name} has shape {list(v.shape)}, expected {list(shape)}")
        self.used.add(name)
        return v

    def unused(self):
        return sorted(n for n in self.t if n not in self.used and not n.startswith(self.IGNORED)
                      and not n.endswith("rotary_emb.inv_freq"))


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    # LlamaRMSNorm / Qwen3RMSNorm / OlmoeRMSNorm: weight * (x * rsqrt(mean(x^2) + eps)), f32.
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rms_norm_zero_centered(x, w, eps):
    # Qwen3_5MoeRMSNorm: (x * rsqrt(mean(x^2) + eps)) * (1 + weight).
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) * (1.0 + w)


def l2_normalize(x, eps=1e-6):
    # modeling_qwen3_5_moe.l2norm: x * rsqrt(sum(x^2) + eps), eps 1e-6 as the kernels call it.
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def swiglu(x, gate, up, down):
    return linear(F.silu(linear(x, gate)) * linear(x, up), down)


def half_turn(x):
    # rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the rotated dims.
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Rope:
    """Split-half RoPE over the first `dim` dims of each head (the rest pass through, as
    apply_rotary_pos_emb of qwen3_5_moe / qwen3_next does with a partial rotary factor)."""

    def __init__(self, inv_freq):
        self.inv_freq = inv_freq
        self.dim = 2 * inv_freq.numel()

    def apply(self, x, pos0):
        # x [heads, T, head_dim] at absolute positions pos0 .. pos0 + T - 1.
        t = x.shape[1]
        pos = torch.arange(pos0, pos0 + t, dtype=torch.int64).float()
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        rot, rest = x[..., :self.dim], x[..., self.dim:]
        return torch.cat((rot * cos + half_turn(rot) * sin, rest), dim=-1)


def default_inv_freq(theta, dim):
    # compute_default_rope_parameters: 1 / theta^(arange(0, dim, 2) / dim), in float32.
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3_inv_freq(inv_freq, rp, max_positions):
    # modeling_rope_utils._compute_llama3_parameters (original_max_position_embeddings falls
    # back to max_position_embeddings, as standardize_rope_params sets it).
    factor = rp["factor"]
    low, high = rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp.get("original_max_position_embeddings", max_positions)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def gated_delta_recurrence(q, k, v, g, beta, S):
    """torch_recurrent_gated_delta_rule, step by step. q, k [T, H, dk] (already normalized,
    scaled and repeated to the value heads), v [T, H, dv], g and beta [T, H], state S
    [H, dk, dv]. Returns the outputs [T, H, dv] and the final state."""
    T, H, dv = v.shape
    out = torch.empty(T, H, dv)
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]              # decay
        kv_mem = (S * k[t][:, :, None]).sum(dim=1)          # k_t^T S        [H, dv]
        delta = (v[t] - kv_mem) * beta[t][:, None]          # (v_t - k_t^T S) beta_t
        S = S + k[t][:, :, None] * delta[:, None, :]        # S += k_t delta^T
        out[t] = (S * q[t][:, :, None]).sum(dim=1)          # o_t = q_t^T S
    return out, S


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

class Model:
    def __init__(self, ckpt, attention_only=False):
        with open(os.path.join(ckpt, "config.json")) as f:
            top = json.load(f)
        self.family = top.get("model_type")
        if self.family not in FAMILIES:
            raise RefError(f"model_type {self.family!r} is not one of {', '.join(FAMILIES)}")
        self.hybrid = self.family.startswith("qwen3_5_moe")
        if attention_only and not self.hybrid:
            raise RefError("--attention-only applies to qwen3_5_moe only")
        self.attention_only = attention_only
        self.w = Weights(ckpt)
        self.prefix = "model."
        c = top
        if self.family == "qwen3_5_moe":
            # Qwen3_5MoeForConditionalGeneration: the text model's config is text_config and
            # its weights are model.language_model.* (lm_head.weight stays at top level).
            c = top.get("text_config")
            if not isinstance(c, dict):
                raise RefError("qwen3_5_moe config.json has no text_config")
            self.prefix = "model.language_model."
        elif self.family == "qwen3_5_moe_text" and self.w.has(
                "model.language_model.embed_tokens.weight"):
            self.prefix = "model.language_model."
        self.c = c
        act = c.get("hidden_act", "silu")
        if act != "silu":
            raise RefError(f"hidden_act {act!r}: only silu is implemented")
        self.d = c["hidden_size"]
        self.vocab = c["vocab_size"]
        self.n_layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        # getattr(config, "head_dim", None) or hidden_size // num_attention_heads
        self.head_dim = c.get("head_dim") or self.d // self.heads
        default_eps = 1e-5 if self.family == "olmoe" else 1e-6
        self.eps = c.get("rms_norm_eps", default_eps)
        self.norm = rms_norm_zero_centered if self.hybrid else rms_norm
        if c.get("use_sliding_window"):
            raise RefError("use_sliding_window: sliding-window attention is not implemented")
        self.rope = Rope(self.rope_inv_freq(c))
        self.layer_types = self.resolve_layer_types(c)
        self.layers = [self.load_layer(i) for i in range(self.n_layers)]
        p = self.prefix
        self.embed = self.w.get(p + "embed_tokens.weight", (self.vocab, self.d))
        self.final_norm = self.w.get(p + "norm.weight", (self.d,))
        if self.tied(top):
            self.lm_head = self.embed
        else:
            self.lm_head = self.w.get("lm_head.weight", (self.vocab, self.d))
        unused = self.w.unused()
        if unused:
            raise RefError(f"{len(unused)} tensors this reference does not place, e.g. "
                           + ", ".join(unused[:5]))

    # -- configuration -------------------------------------------------------------------------

    def tied(self, top):
        # PreTrainedModel ties lm_head to embed_tokens when tie_word_embeddings; for
        # qwen3_5_moe the top-level config decides (Qwen3_5MoeConfig.tie_word_embeddings).
        if self.hybrid:
            t = top.get("tie_word_embeddings", False)
            inner = self.c.get("tie_word_embeddings", t)
            if bool(inner) != bool(t):
                raise RefError("tie_word_embeddings differs between config and text_config")
            return bool(t)
        return bool(self.c.get("tie_word_embeddings", False))

    def rope_inv_freq(self, c):
        # RotaryEmbeddingConfigMixin.convert_rope_params_to_dict/standardize_rope_params:
        # rope_parameters (new) or rope_scaling (old), rope_theta inside it or at top level
        # (default 10000), partial_rotary_factor inside it or at top level.
        rp = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        theta = rp.get("rope_theta", c.get("rope_theta", 10000.0))
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        inner, outer = rp.get("partial_rotary_factor"), c.get("partial_rotary_factor")
        if inner is not None and outer is not None and inner != outer:
            raise RefError(f"partial_rotary_factor {inner} in rope_parameters and {outer} "
                           "at top level disagree")
        factor = inner if inner is not None else outer
        if factor is None:
            # Qwen3_5MoeTextConfig.__post_init__ defaults it to 0.25.
            factor = 0.25 if self.hybrid else 1.0
        dim = int(self.head_dim * factor)
        if dim % 2 or dim <= 0 or dim > self.head_dim:
            raise RefError(f"rotary dim {dim} (head_dim {self.head_dim} x {factor}) is not usable")
        inv = default_inv_freq(theta, dim)
        if rope_type == "llama3" and self.family == "llama":
            inv = llama3_inv_freq(inv, rp, c.get("max_position_embeddings"))
        elif rope_type != "default":
            raise RefError(f"rope_type {rope_type!r} is not implemented for {self.family}")
        if self.hybrid:
            # Qwen3_5MoeTextRotaryEmbedding computes one angle table per t/h/w position row and
            # recomposes them (recomposition_frequencies: row 0, then the H and W rows written
            # into the interleaved slots offset 1 and 2, step 3, up to 3 * mrope_section[i];
            # older releases' apply_interleaved_mrope is the same interleave, and the
            # non-interleaved Qwen2-VL form takes contiguous sections). For text-only input the
            # model builds position_ids as arange expanded to all rows (Qwen3_5MoeTextModel.
            # forward; get_rope_index gives text tokens equal t/h/w positions too), so the three
            # tables are identical and any recomposition of them, whatever mrope_section and
            # mrope_interleaved say, is the plain table: ordinary split-half RoPE over the first
            # int(head_dim * partial_rotary_factor) dims with the default inverse frequencies.
            pass
        return inv

    def resolve_layer_types(self, c):
        if not self.hybrid:
            return ["full_attention"] * self.n_layers
        lt = c.get("layer_types")
        if lt is None:
            # Qwen3_5MoeTextConfig.__post_init__: from full_attention_interval (default 4).
            k = c.get("full_attention_interval", 4)
            lt = ["linear_attention" if (i + 1) % k else "full_attention"
                  for i in range(self.n_layers)]
        if len(lt) != self.n_layers or set(lt) - {"linear_attention", "full_attention"}:
            raise RefError(f"layer_types {lt} do not describe {self.n_layers} layers")
        return list(lt)

    # -- weights -------------------------------------------------------------------------------

    def load_layer(self, i):
        w, c, p = self.w, self.c, f"{self.prefix}layers.{i}."
        d = self.d
        L = {"type": self.layer_types[i],
             "in_norm": w.get(p + "input_layernorm.weight", (d,)),
             "post_norm": w.get(p + "post_attention_layernorm.weight", (d,))}
        if L["type"] == "linear_attention":
            L.update(self.load_deltanet(p + "linear_attn."))
        else:
            L.update(self.load_attention(p + "self_attn."))
        L["mlp"] = self.load_mlp(i, p + "mlp.")
        return L

    def load_attention(self, p):
        w, c = self.w, self.c
        d, H, KV, D = self.d, self.heads, self.kv_heads, self.head_dim
        q_rows = 2 * H * D if self.hybrid else H * D  # gated attention: query | gate per head
        if self.hybrid and not c.get("attn_output_gate", True):
            raise RefError("attn_output_gate false: ungated attention is not implemented")
        A = {"q": w.get(p + "q_proj.weight", (q_rows, d)),
             "k": w.get(p + "k_proj.weight", (KV * D, d)),
             "v": w.get(p + "v_proj.weight", (KV * D, d)),
             "o": w.get(p + "o_proj.weight", (d, H * D))}
        if c.get("attention_bias", False):
            A["q_b"] = w.get(p + "q_proj.bias", (q_rows,))
            A["k_b"] = w.get(p + "k_proj.bias", (KV * D,))
            A["v_b"] = w.get(p + "v_proj.bias", (KV * D,))
            A["o_b"] = w.get(p + "o_proj.bias", (d,))
        if self.family in ("qwen3", "qwen3_moe") or self.hybrid:
            A["q_norm"] = w.get(p + "q_norm.weight", (D,))
            A["k_norm"] = w.get(p + "k_norm.weight", (D,))
        elif self.family == "olmoe":
            # OlmoeAttention: q_norm over hidden_size (= heads * head_dim), k_norm over
            # (hidden_size // heads) * kv_heads.
            A["q_norm"] = w.get(p + "q_norm.weight", (H * D,))
            A["k_norm"] = w.get(p + "k_norm.weight", (KV * D,))
        return {"attn": A}

    def load_deltanet(self, p):
        w, c, d = self.w, self.c, self.d
        nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        K = c.get("linear_conv_kernel_dim", 4)
        if nv % nk:
            raise RefError(f"linear_num_value_heads {nv} is not a multiple of key heads {nk}")
        conv_dim = 2 * nk * dk + nv * dv
        return {"dn": {
            "nk": nk, "nv": nv, "dk": dk, "dv": dv, "K": K,
            "qkv": w.get(p + "in_proj_qkv.weight", (conv_dim, d)),
            "z": w.get(p + "in_proj_z.weight", (nv * dv, d)),
            "b": w.get(p + "in_proj_b.weight", (nv, d)),
            "a": w.get(p + "in_proj_a.weight", (nv, d)),
            "conv": w.get(p + "conv1d.weight", (conv_dim, 1, K)).reshape(conv_dim, K),
            "dt_bias": w.get(p + "dt_bias", (nv,)),
            "A_log": w.get(p + "A_log", (nv,)),
            "norm": w.get(p + "norm.weight", (dv,)),
            "out": w.get(p + "out_proj.weight", (d, nv * dv)),
        }}

    def is_moe_layer(self, i):
        c = self.c
        if self.family == "olmoe" or self.hybrid:
            return True  # OlmoeDecoderLayer / Qwen3_5MoeDecoderLayer: every layer sparse
        if self.family == "qwen3_moe":
            # Qwen2MoeDecoderLayer: sparse unless listed in mlp_only_layers, and only every
            # decoder_sparse_step-th layer.
            return (i not in c.get("mlp_only_layers", []) and c.get("num_experts", 0) > 0
                    and (i + 1) % c.get("decoder_sparse_step", 1) == 0)
        return False

    def load_mlp(self, i, p):
        w, c, d = self.w, self.c, self.d
        if not self.is_moe_layer(i):
            inter = c["intermediate_size"]
            bias = self.family == "llama" and c.get("mlp_bias", False)
            M = {"kind": "dense",
                 "gate": w.get(p + "gate_proj.weight", (inter, d)),
                 "up": w.get(p + "up_proj.weight", (inter, d)),
                 "down": w.get(p + "down_proj.weight", (d, inter))}
            if bias:
                M["gate_b"] = w.get(p + "gate_proj.bias", (inter,))
                M["up_b"] = w.get(p + "up_proj.bias", (inter,))
                M["down_b"] = w.get(p + "down_proj.bias", (d,))
            return M
        E = c["num_experts"]
        # OlmoeExperts are OlmoeMLP(config) = GemmaMLP: intermediate_size; the Qwen experts use
        # moe_intermediate_size (Qwen2MoeExperts, Qwen3_5MoeExperts).
        inter = c["intermediate_size"] if self.family == "olmoe" else c["moe_intermediate_size"]
        M = {"kind": "moe", "E": E, "k": c["num_experts_per_tok"],
             "router": w.get(p + "gate.weight", (E, d))}
        # Qwen3_5MoeTopKRouter always renormalizes the top-k weights (its config has no
        # norm_topk_prob); Qwen2MoeTopKRouter (qwen3_moe) and OlmoeSparseMoeBlock only when
        # norm_topk_prob (default false in both configs).
        M["renorm"] = True if self.hybrid else bool(c.get("norm_topk_prob", False))
        if w.has(p + "experts.gate_up_proj"):
            # Fused (Qwen3_5MoeExperts / transformers v5 layout): gate_up_proj [E, 2I, H], gate
            # rows first (linear(...).chunk(2)); down_proj [E, H, I].
            gu = w.get(p + "experts.gate_up_proj", (E, 2 * inter, d))
            dn = w.get(p + "experts.down_proj", (E, d, inter))
            M["experts"] = [(gu[e, :inter], gu[e, inter:], dn[e]) for e in range(E)]
        else:
            M["experts"] = [
                (w.get(f"{p}experts.{e}.gate_proj.weight", (inter, d)),
                 w.get(f"{p}experts.{e}.up_proj.weight", (inter, d)),
                 w.get(f"{p}experts.{e}.down_proj.weight", (d, inter))) for e in range(E)]
        if self.hybrid:
            si = c["shared_expert_intermediate_size"]
            M["shared"] = (w.get(p + "shared_expert.gate_proj.weight", (si, d)),
                           w.get(p + "shared_expert.up_proj.weight", (si, d)),
                           w.get(p + "shared_expert.down_proj.weight", (d, si)))
            M["shared_gate"] = w.get(p + "shared_expert_gate.weight", (1, d))
        return M

    # -- forward -------------------------------------------------------------------------------

    def new_cache(self):
        cache = []
        for L in self.layers:
            if L["type"] == "linear_attention":
                dn = L["dn"]
                conv_dim = 2 * dn["nk"] * dn["dk"] + dn["nv"] * dn["dv"]
                cache.append({"conv": torch.zeros(conv_dim, dn["K"] - 1),
                              "S": torch.zeros(dn["nv"], dn["dk"], dn["dv"])})
            else:
                cache.append({"k": torch.zeros(self.kv_heads, 0, self.head_dim),
                              "v": torch.zeros(self.kv_heads, 0, self.head_dim)})
        return {"pos": 0, "layers": cache}

    def attention(self, A, x, lc, pos0):
        T, H, KV, D = x.shape[0], self.heads, self.kv_heads, self.head_dim
        q = linear(x, A["q"], A.get("q_b"))
        k = linear(x, A["k"], A.get("k_b"))
        v = linear(x, A["v"], A.get("v_b"))
        gate = None
        if self.hybrid:
            # Qwen3_5MoeAttention: q_proj(x).view(T, H, 2 * D).chunk(2): per head the first D
            # outputs are the query, the next D the output gate.
            qg = q.view(T, H, 2 * D)
            q, gate = qg[..., :D], qg[..., D:].reshape(T, H * D)
        if self.family == "olmoe":
            # OlmoeAttention: q_norm / k_norm over the whole projections, then clip_qkv clamps
            # q, k and v, then the split into heads.
            q = rms_norm(q, A["q_norm"], self.eps)
            k = rms_norm(k, A["k_norm"], self.eps)
            clip = self.c.get("clip_qkv")
            if clip is not None:
                q, k, v = (t.clamp(-clip, clip) for t in (q, k, v))
        q = q.reshape(T, H, D).transpose(0, 1)
        k = k.reshape(T, KV, D).transpose(0, 1)
        v = v.reshape(T, KV, D).transpose(0, 1)
        if self.family in ("qwen3", "qwen3_moe") or self.hybrid:
            # Qwen3Attention: q_norm / k_norm per head over head_dim, before RoPE.
            q = self.norm(q, A["q_norm"], self.eps)
            k = self.norm(k, A["k_norm"], self.eps)
        q = self.rope.apply(q, pos0)
        k = self.rope.apply(k, pos0)
        lc["k"] = torch.cat((lc["k"], k), dim=1)
        lc["v"] = torch.cat((lc["v"], v), dim=1)
        keys, vals = lc["k"], lc["v"]
        S = keys.shape[1]
        # repeat_kv: query head h reads kv head h // (H / KV).
        group = H // KV
        keys = keys.repeat_interleave(group, dim=0)
        vals = vals.repeat_interleave(group, dim=0)
        scores = (q @ keys.transpose(1, 2)) * D ** -0.5
        qpos = torch.arange(pos0, pos0 + T)[:, None]
        kpos = torch.arange(S)[None, :]
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        out = (probs @ vals).transpose(0, 1).reshape(T, H * D)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return linear(out, A["o"], A.get("o_b"))

    def deltanet(self, dn, x, lc):
        # Qwen3_5MoeGatedDeltaNet.forward, with torch_recurrent_gated_delta_rule's recurrence.
        T = x.shape[0]
        nk, nv, dk, dv, K = dn["nk"], dn["nv"], dn["dk"], dn["dv"], dn["K"]
        mixed = linear(x, dn["qkv"]).T  # [C, T], channels q | k | v
        # Depthwise causal conv1d (no bias) then SiLU: out[c, t] = sum_j w[c, j] *
        # in[c, t - (K - 1) + j], the K - 1 inputs before the first carried in the cache.
        padded = torch.cat((lc["conv"], mixed), dim=1)
        conv = torch.zeros_like(mixed)
        for j in range(K):
            conv += dn["conv"][:, j:j + 1] * padded[:, j:j + T]
        lc["conv"] = padded[:, padded.shape[1] - (K - 1):] if K > 1 else padded[:, :0]
        conv = F.silu(conv).T  # [T, C]
        q = conv[:, :nk * dk].reshape(T, nk, dk)
        k = conv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
        v = conv[:, 2 * nk * dk:].reshape(T, nv, dv)
        z = linear(x, dn["z"]).reshape(T, nv, dv)
        beta = torch.sigmoid(linear(x, dn["b"]))  # [T, nv]
        g = -torch.exp(dn["A_log"]) * F.softplus(linear(x, dn["a"]) + dn["dt_bias"])
        # use_qk_l2norm_in_kernel, then q / sqrt(head_k_dim); q/k heads repeated to the value
        # heads (repeat_interleave: value head h reads key head h // (nv / nk)).
        q = l2_normalize(q) / math.sqrt(dk)
        k = l2_normalize(k)
        rep = nv // nk
        q = q.repeat_interleave(rep, dim=1)
        k = k.repeat_interleave(rep, dim=1)
        out, lc["S"] = gated_delta_recurrence(q, k, v, g, beta, lc["S"])
        # Qwen3_5MoeRMSNormGated per value head: normalize, * weight (not zero-centered),
        # * silu(z); then out_proj.
        normed = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + self.eps)
        y = (dn["norm"] * normed) * F.silu(z)
        return linear(y.reshape(T, nv * dv), dn["out"])

    def mlp(self, M, x):
        if M["kind"] == "dense":
            g = linear(x, M["gate"], M.get("gate_b"))
            u = linear(x, M["up"], M.get("up_b"))
            return linear(F.silu(g) * u, M["down"], M.get("down_b"))
        # Softmax (f32) over all experts, top-k, optional renormalization of the k weights.
        probs = torch.softmax(linear(x, M["router"]), dim=-1, dtype=torch.float32)
        top_w, top_i = torch.topk(probs, M["k"], dim=-1)
        if M["renorm"]:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(M["E"]):
            tok, slot = torch.where(top_i == e)
            if tok.numel() == 0:
                continue
            gate, up, down = M["experts"][e]
            y = swiglu(x[tok], gate, up, down)
            out.index_add_(0, tok, y * top_w[tok, slot, None])
        if "shared" in M:
            # Qwen3_5MoeSparseMoeBlock: + sigmoid(shared_expert_gate(x)) * shared_expert(x).
            out = out + torch.sigmoid(linear(x, M["shared_gate"])) * swiglu(x, *M["shared"])
        return out

    def forward(self, ids, cache):
        """Logits [len(ids), vocab] for ids following the tokens already in cache."""
        if any(not 0 <= i < self.vocab for i in ids):
            raise RefError(f"a token id is outside the vocabulary of {self.vocab}")
        pos0 = cache["pos"]
        h = self.embed[torch.tensor(ids, dtype=torch.int64)]
        for L, lc in zip(self.layers, cache["layers"]):
            if L["type"] == "linear_attention" and self.attention_only:
                continue  # the whole layer is the identity
            x = self.norm(h, L["in_norm"], self.eps)
            if L["type"] == "linear_attention":
                h = h + self.deltanet(L["dn"], x, lc)
            else:
                h = h + self.attention(L["attn"], x, lc, pos0)
            h = h + self.mlp(L["mlp"], self.norm(h, L["post_norm"], self.eps))
        cache["pos"] = pos0 + len(ids)
        h = self.norm(h, self.final_norm, self.eps)
        return linear(h, self.lm_head)

    def logits(self, ids):
        return self.forward(list(ids), self.new_cache())

    def greedy(self, prompt, n):
        """n tokens continuing prompt, one at a time through the cache; ties take the first."""
        cache = self.new_cache()
        last = self.forward(list(prompt), cache)[-1]
        out = []
        for i in range(n):
            tok = int(np.argmax(last.numpy()))
            out.append(tok)
            if i + 1 < n:
                last = self.forward([tok], cache)[-1]
        return out


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

USAGE = ("usage: decoder_reference.py [--attention-only] CKPT_DIR FULL_IDS PROMPT_LEN "
         "LOGITS_NPY\n"
         "       decoder_reference.py --logits [--attention-only] CKPT_DIR FULL_IDS OUT_NPY")


def parse_ids(s):
    try:
        ids = [int(x) for x in s.split(",") if x.strip() != ""]
    except ValueError:
        raise RefError(f"FULL_IDS {s!r} is not a comma-separated list of integers")
    if not ids:
        raise RefError("FULL_IDS is empty")
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
        print("argmax: FAIL not compared (shapes differ)")
        ok = False
    else:
        given = given.astype(np.float32)
        scale = float(np.abs(ref).max())
        if not np.isfinite(given).all():
            bad = int(np.argwhere(~np.isfinite(given))[0][0])
            print(f"logits: FAIL non-finite value in given row {bad}")
            ok = False
        else:
            diff = np.abs(ref - given)
            rel = float(diff.max()) / scale if scale > 0 else float(diff.max())
            worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
            if rel <= TOLERANCE:
                print(f"logits: ok {ref.shape[0]} positions x {ref.shape[1]} vocab, max diff "
                      f"{rel:.3e} relative (<= {TOLERANCE:g})")
            else:
                print(f"logits: FAIL max diff {rel:.3e} relative > {TOLERANCE:g}, at position "
                      f"{worst[0]} token {worst[1]} (ref {ref[worst]:.6g}, given "
                      f"{given[worst]:.6g})")
                ok = False
        ra, ga = np.argmax(ref, axis=-1), np.argmax(given, axis=-1)
        differ = np.nonzero(ra != ga)[0]
        if differ.size == 0:
            print(f"argmax: ok identical at all {len(ra)} positions")
        else:
            t = int(differ[0])
            print(f"argmax: FAIL {differ.size} positions differ, first at position {t} "
                  f"(ref {int(ra[t])}, given {int(ga[t])})")
            ok = False
    n = len(full) - prompt_len
    seq = model.greedy(full[:prompt_len], n) if n > 0 else []
    want = full[prompt_len:]
    if seq == want:
        print(f"greedy: ok {n} tokens after a {prompt_len}-token prompt identical")
    else:
        t = next(i for i in range(n) if seq[i] != want[i])
        print(f"greedy: FAIL first differing token at position {prompt_len + t} "
              f"(ref {seq[t]}, FULL_IDS {want[t]})")
        ok = False
    return ok


def main(argv):
    identity = "--attention-only" in argv
    logits_mode = "--logits" in argv
    args = [a for a in argv if a not in ("--attention-only", "--logits")]
    if any(a.startswith("--") for a in args) or len(args) != (3 if logits_mode else 4):
        print(USAGE, file=sys.stderr)
        return 1
    try:
        model = Model(args[0], attention_only=identity)
        full = parse_ids(args[1])
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
        print(f"decoder_reference: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
