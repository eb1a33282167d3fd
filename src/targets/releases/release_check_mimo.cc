// check-load for MiMo-V2.6 as released (model_type mimo_v2): what c/mimo.c's load_cfg,
// model_load and expert_table_init read (upstream JustVugg/colibri c/mimo.c, archive id
// 70107497219; header of @27603109). Top-level config keys; names under `model.`; the fused
// qkv_proj and the dense MLP of non-MoE layers FP8 e4m3 with an F32 `_scale_inv` per 128x128
// block (qkv_proj's grid tiled per num_key_value_heads chunk, or continuous); o_proj, router,
// embeddings and lm_head BF16; norms, sinks and the router bias BF16 or F32; routed experts
// MXFP4 as U8 `weight` [O, I/2] + U8 `weight_scale` [O, I/32] (one e8m0 per 32 columns). The
// vision tower is not checked.
#include <fmt/format.h>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/core/checked.h"
#include "targets/releases/release_check.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kBlock = 128;

struct Mimo {
  std::uint64_t vocab, hidden, layers, dense_inter, moe_inter, experts;
  std::uint64_t heads[2], kv_heads[2], head_dim[2], v_dim[2];
  bool sink[2];
  std::vector<std::uint64_t> swa, moe;
};

std::uint64_t key_or(const Json& c, const char* key, std::uint64_t fallback, TargetLoadReport& r) {
  return c.contains(key) ? release_key(c, {key}, r) : fallback;
}

bool read_config(const Json& c, TargetLoadReport& r, Mimo& m) {
  if (!c.contains("model_type") || c["model_type"] != "mimo_v2") {
    r.unloadable.push_back("config.json: model_type is not \"mimo_v2\"");
    return false;
  }
  m.vocab = release_key(c, {"vocab_size"}, r);
  m.hidden = release_key(c, {"hidden_size"}, r);
  m.layers = release_key(c, {"num_hidden_layers"}, r);
  m.moe_inter = release_key(c, {"moe_intermediate_size"}, r);
  m.experts = release_key(c, {"n_routed_experts"}, r);
  release_key(c, {"num_experts_per_tok"}, r);
  m.heads[0] = release_key(c, {"num_attention_heads"}, r);
  m.kv_heads[0] = release_key(c, {"num_key_value_heads"}, r);
  m.head_dim[0] = release_key(c, {"head_dim"}, r);
  m.dense_inter = key_or(c, "intermediate_size", 0, r);
  m.v_dim[0] = key_or(c, "v_head_dim", m.head_dim[0], r);
  m.heads[1] = key_or(c, "swa_num_attention_heads", m.heads[0], r);
  m.kv_heads[1] = key_or(c, "swa_num_key_value_heads", m.kv_heads[0], r);
  m.head_dim[1] = key_or(c, "swa_head_dim", m.head_dim[0], r);
  m.v_dim[1] = key_or(c, "swa_v_head_dim", m.v_dim[0], r);
  m.sink[0] = c.value("add_full_attention_sink_bias", false) == true;
  m.sink[1] = c.value("add_swa_attention_sink_bias", false) == true;
  if (!r.unloadable.empty()) return false;
  m.swa = release_int_list(c, "hybrid_layer_pattern", m.layers, r);
  m.moe = release_int_list(c, "moe_layer_freq", m.layers, r);
  if (!r.unloadable.empty()) return false;
  const std::uint64_t chunks = m.kv_heads[0];
  bool ok = m.layers >= 1 && m.layers <= 128 && m.hidden % 32 == 0 && m.moe_inter % 32 == 0 &&
            chunks >= 1 && chunks <= 16;
  for (int k = 0; ok && k < 2; ++k) {
    ok = m.kv_heads[k] && m.heads[k] % m.kv_heads[k] == 0 && m.heads[k] % chunks == 0 &&
         m.kv_heads[k] % chunks == 0;
  }
  if (!ok) {
    r.unloadable.push_back(
        "config.json: dims mimo.c refuses (1..128 layers, hidden_size and "
        "moe_intermediate_size multiples of 32, head counts dividing into the "
        "num_key_value_heads qkv chunks)");
  }
  return ok;
}

void fp8(Loader& l, const std::string& name, std::uint64_t o, std::uint64_t i) {
  release_fp8(l, name, name + "_scale_inv", o, i, kBlock, {Dtype::kF32});
}

// load_qkv: the fused qkv is stored in num_key_value_heads chunks [Q_c | K_c | V_c]; its
// scale grid has ceil(chunk rows / 128) rows per chunk, or is one continuous grid.
void qkv(Loader& l, const Mimo& m, const std::string& p, int k) {
  const std::uint64_t t = m.kv_heads[0];
  const std::uint64_t rpc = (m.heads[k] / t) * m.head_dim[k] + (m.kv_heads[k] / t) * m.head_dim[k] +
                            (m.kv_heads[k] / t) * m.v_dim[k];
  const std::string name = p + "self_attn.qkv_proj.weight";
  release_tensor(l, name, {Dtype::kF8E4M3}, {t * rpc, m.hidden});
  const auto s = l.get(name + "_scale_inv");
  if (!s) return;
  const std::uint64_t per_chunk = t * ceil_div(rpc, kBlock), continuous = ceil_div(t * rpc, kBlock);
  const auto& shape = s->entry->shape;
  const std::uint64_t rows = shape.size() == 2 ? shape[0] : 0;
  if (s->entry->dtype != Dtype::kF32 || shape.size() != 2 ||
      shape[1] != ceil_div(m.hidden, kBlock) || (rows != per_chunk && rows != continuous)) {
    l.bad(name + "_scale_inv",
          fmt::format("{} [{}], mimo.c reads F32 [{} or {}, {}]",
                      dtype_info(s->entry->dtype).safetensors, fmt::join(shape, ", "), per_chunk,
                      continuous, ceil_div(m.hidden, kBlock)));
  } else {
    ++l.report().checked;
  }
}

// expert_table_init: six U8 tensors per expert, checked by dtype and byte count.
void expert(Loader& l, const Mimo& m, const std::string& x) {
  const std::uint64_t h = m.hidden, mi = m.moe_inter;
  const struct {
    const char* proj;
    std::uint64_t o, i;
  } parts[] = {{"down_proj", h, mi}, {"gate_proj", mi, h}, {"up_proj", mi, h}};
  for (const auto& p : parts) {
    for (const bool scale : {false, true}) {
      const std::string name = fmt::format("{}{}.{}", x, p.proj, scale ? "weight_scale" : "weight");
      const std::uint64_t bytes = p.o * (scale ? p.i / 32 : p.i / 2);
      const auto t = l.get(name);
      if (!t) continue;
      if (t->entry->dtype != Dtype::kU8 || t->entry->byte_size() != bytes) {
        l.bad(name,
              fmt::format("{} of {} bytes, mimo.c reads U8 of {} bytes",
                          dtype_info(t->entry->dtype).safetensors, t->entry->byte_size(), bytes));
      } else {
        ++l.report().checked;
      }
    }
  }
}

void layer(Loader& l, const Mimo& m, std::uint64_t li) {
  const std::string p = fmt::format("model.layers.{}.", li);
  const int k = m.swa[li] == 1 ? 1 : 0;
  release_floats(l, p + "input_layernorm.weight", m.hidden);
  release_floats(l, p + "post_attention_layernorm.weight", m.hidden);
  qkv(l, m, p, k);
  release_tensor(l, p + "self_attn.o_proj.weight", {Dtype::kBF16},
                 {m.hidden, m.heads[k] * m.v_dim[k]});
  if (m.sink[k]) release_floats(l, p + "self_attn.attention_sink_bias", m.heads[k]);
  if (m.moe[li] == 0) {
    fp8(l, p + "mlp.gate_proj.weight", m.dense_inter, m.hidden);
    fp8(l, p + "mlp.up_proj.weight", m.dense_inter, m.hidden);
    fp8(l, p + "mlp.down_proj.weight", m.hidden, m.dense_inter);
    return;
  }
  release_tensor(l, p + "mlp.gate.weight", {Dtype::kBF16}, {m.experts, m.hidden});
  release_floats(l, p + "mlp.gate.e_score_correction_bias", m.experts);
  for (std::uint64_t e = 0; e < m.experts; ++e) {
    expert(l, m, fmt::format("{}mlp.experts.{}.", p, e));
  }
}

}  // namespace

Status check_mimo_release(const ReleaseInput& in, Loader& l) {
  auto& r = l.report();
  Mimo m{};
  if (!read_config(in.config, r, m)) return ok_status();
  if (m.layers * (m.experts * 6 + 20) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  release_tensor(l, "model.embed_tokens.weight", {Dtype::kBF16}, {m.vocab, m.hidden});
  release_floats(l, "model.norm.weight", m.hidden);
  release_tensor(l, "lm_head.weight", {Dtype::kBF16}, {m.vocab, m.hidden});
  for (std::uint64_t li = 0; li < m.layers; ++li) layer(l, m, li);
  return ok_status();
}

}  // namespace qrepack
