// check-load of colibri-qwen36: what c/qwen36.c's loader refuses (check_load_target).
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {

Status check_qwen36(Loader& l, const Json& c, const Json& meta) {
  auto& r = l.report();
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t v = need(c, "vocab_size", r);
  if (!c.contains("rms_norm_eps") || !c["rms_norm_eps"].is_number()) {
    r.unloadable.push_back("config.json: missing or non-numeric \"rms_norm_eps\"");
  }
  if (!meta.is_object()) r.unloadable.push_back("qwen36_meta.json: missing");
  if (!r.unloadable.empty()) return ok_status();
  if (meta_or(meta, "n_layers", 0) != layers) {
    r.unloadable.push_back(
        "qwen36_meta.json: n_layers differs from config.json's num_hidden_layers");
  }
  const std::uint64_t e = meta_or(meta, "num_experts", 256),
                      inter = meta_or(meta, "moe_inter", 512);
  const std::uint64_t shared = meta_or(meta, "shared_inter", 512);
  const std::uint64_t qh = meta_or(meta, "q_heads", d / 16),
                      kvh = meta_or(meta, "kv_heads", qh / 8);
  const std::uint64_t hd = meta_or(meta, "head_dim", qh ? d / qh : 0);
  const std::uint64_t qhd = meta_or(meta, "q_head_dim", 2 * hd),
                      khd = meta_or(meta, "k_head_dim", hd);
  const std::uint64_t o_in = meta_or(meta, "o_in", qh * hd);
  const std::uint64_t gs = meta_or(meta, "expert_gs", 0),
                      dbits = meta_or(meta, "expert_down_bits", 0);
  const std::uint64_t dgs = dbits ? meta_or(meta, "expert_down_gs", 0) : gs;
  const std::uint64_t vh = meta_or(meta, "dn_vheads", 0);
  const std::uint64_t vd = meta_or(meta, "dn_vdim", 0), convk = meta_or(meta, "dn_convk", 0);
  const std::uint64_t conv_dim = meta_or(meta, "dn_conv_dim", 0);
  std::vector<bool> attn(layers);
  const bool typed = meta.contains("layer_types") && meta["layer_types"].is_array();
  for (std::uint64_t i = 0; i < layers; ++i) {
    attn[i] = typed ? i < meta["layer_types"].size() && meta["layer_types"][i] == "full_attention"
                    : i % 4 == 3;
  }
  if (o_in != qh * hd || khd != hd || qhd < hd) {
    r.unloadable.push_back(
        "qwen36_meta.json: o_in must be q_heads x head_dim and k_head_dim "
        "head_dim (the forward assumes both)");
  }
  l.float_tensor("model.embed_tokens.weight", v * d);
  l.float_tensor("lm_head.weight", v * d);
  l.float_tensor("model.norm.weight", d);
  const auto gcount = [](std::uint64_t cols, std::uint64_t g) { return g ? ceil_div(cols, g) : 1; };
  const auto attention = [&](const std::string& p) {
    l.float_tensor(p + "self_attn.q_proj.weight", d * qh * qhd);
    l.float_tensor(p + "self_attn.k_proj.weight", d * kvh * khd);
    l.float_tensor(p + "self_attn.v_proj.weight", d * kvh * khd);
    l.float_tensor(p + "self_attn.o_proj.weight", o_in * d);
    l.float_tensor(p + "self_attn.q_norm.weight", hd, false);
    l.float_tensor(p + "self_attn.k_norm.weight", hd, false);
  };
  // The MoE MLP (router, shared expert, merged experts: 3n, 3n/2 or 2n bytes), or a dense
  // model's mlp.{gate,up,down}_proj at shared_inter (= intermediate_size) wide.
  const auto mlp = [&](const std::string& p) {
    if (e == 0) {
      if (shared == 0) return;
      l.float_tensor(p + "mlp.gate_proj.weight", d * shared);
      l.float_tensor(p + "mlp.up_proj.weight", d * shared);
      l.float_tensor(p + "mlp.down_proj.weight", d * shared);
      return;
    }
    l.float_tensor(p + "mlp.gate.weight", e * d);
    if (shared > 0) {
      l.float_tensor(p + "mlp.shared_expert.gate_proj.weight", d * shared);
      l.float_tensor(p + "mlp.shared_expert.up_proj.weight", d * shared);
      l.float_tensor(p + "mlp.shared_expert.down_proj.weight", d * shared);
    }
    const std::uint64_t n = inter * d;
    for (std::uint64_t x = 0; x < e; ++x) {
      merged_expert(
          l, fmt::format("{}mlp.experts.{}.", p, x), {3 * n, 3 * n / 2, 2 * n},
          [&](std::uint64_t) { return 2 * inter * gcount(d, gs) + d * gcount(inter, dgs); });
    }
  };
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    if (attn[i]) {
      attention(p);
    } else {
      l.float_tensor(p + "linear_attn.in_proj_qkv.weight", d * conv_dim);
      l.float_tensor(p + "linear_attn.in_proj_z.weight", d * vh * vd);
      l.float_tensor(p + "linear_attn.in_proj_b.weight", vh * d);
      l.float_tensor(p + "linear_attn.in_proj_a.weight", vh * d);
      l.float_tensor(p + "linear_attn.conv1d.weight", conv_dim * convk);
      l.float_tensor(p + "linear_attn.dt_bias", vh);
      l.float_tensor(p + "linear_attn.A_log", vh);
      l.float_tensor(p + "linear_attn.norm.weight", vd);
      l.float_tensor(p + "linear_attn.out_proj.weight", vh * vd * d);
    }
    mlp(p);
  }
  // qwen36_mtp.h loads the head when mtp.fc.weight is there: fc [D, 2D], three norms and one
  // full-attention layer with the trunk's MLP.
  if (l.ck().find("mtp.fc.weight")) {
    l.float_tensor("mtp.fc.weight", 2 * d * d);
    for (const char* n :
         {"mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
          "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight"}) {
      l.float_tensor(n, d);
    }
    attention("mtp.layers.0.");
    mlp("mtp.layers.0.");
  }
  return ok_status();
}

}  // namespace qrepack
