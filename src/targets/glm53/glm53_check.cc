// check-load for colibri-glm53: what c/glm53.c's loader requires when it opens a directory
// (reference/colibri-engines.md §1.3; the loader's source @01a537b0). Text keys come from
// text_config (else the top level); the text prefix is model.language_model. when its
// embed_tokens exists, else model.; every layer below num_hidden_layers is read (the MTP
// layer is not); dense and norm tensors must be BF16 / F16 / F32; streamed experts (U8) must
// hold exactly O*I/2 nibble bytes and O*I/64 f32 scales for each of the three projections.
#include <fmt/format.h>

#include "qrepack/checkpoint/glm_moe.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {
namespace {

struct Shape {
  std::uint64_t layers, hidden, experts, inter, first_dense;
  bool index_kpool;
  std::vector<bool> linear;  ///< per layer: Kimi delta attention (else MLA + DSA indexer)
};

// layer_types ("linear..." or an attention kind) and the first sparse MLP layer.
bool read_layout(const Json& t, TargetLoadReport& r, Shape& s) {
  if (!t.contains("layer_types") || !t["layer_types"].is_array() ||
      t["layer_types"].size() != s.layers) {
    r.unloadable.push_back("config.json: layer_types must list every layer");
    return false;
  }
  for (const auto& x : t["layer_types"]) {
    if (!x.is_string()) {
      r.unloadable.push_back("config.json: layer_types holds a non-string");
      return false;
    }
    s.linear.push_back(x.get<std::string>().find("linear") != std::string::npos);
  }
  // glm53.c cross-checks linear_attn_config.full_attn_layers (0-based) against layer_types.
  if (t.contains("linear_attn_config") && t["linear_attn_config"].is_object() &&
      t["linear_attn_config"].contains("full_attn_layers")) {
    const Json& full = t["linear_attn_config"]["full_attn_layers"];
    for (std::size_t i = 0; full.is_array() && i < full.size(); ++i) {
      const bool ok = full[i].is_number_unsigned() && full[i].get<std::uint64_t>() < s.layers &&
                      !s.linear[full[i].get<std::uint64_t>()];
      if (!ok) {
        r.unloadable.push_back(fmt::format(
            "config.json: linear_attn_config.full_attn_layers[{}] ({}) is not a full-attention "
            "layer of layer_types (0-based, as glm53.c reads it)",
            i, full[i].dump().substr(0, 20)));
        return false;
      }
    }
  }
  if (t.contains("first_k_dense_replace") && t["first_k_dense_replace"].is_number_unsigned()) {
    s.first_dense = t["first_k_dense_replace"].get<std::uint64_t>();
  } else if (t.contains("mlp_layer_types") && t["mlp_layer_types"].is_array()) {
    s.first_dense = s.layers;
    for (std::uint64_t i = 0; i < t["mlp_layer_types"].size(); ++i) {
      if (t["mlp_layer_types"][i] == "sparse") {
        s.first_dense = i;
        break;
      }
    }
  } else {
    r.unloadable.push_back("config.json: neither first_k_dense_replace nor mlp_layer_types");
    return false;
  }
  return true;
}

void check_expert(Loader& l, const std::string& p, std::uint64_t rows, std::uint64_t cols) {
  const auto w = l.get(p + ".weight");
  const auto q = l.get(p + ".weight.qs");
  if (!w || !q) return;
  if (w->entry->byte_size() != rows * cols / 2) {
    l.bad(p + ".weight", fmt::format("{} bytes, not {} (int4, {} x {})", w->entry->byte_size(),
                                     rows * cols / 2, rows, cols));
  } else if (q->entry->byte_size() != rows * cols / 64 * 4) {
    l.bad(p + ".weight.qs", fmt::format("{} bytes, not {} (f32 per group of 64)",
                                        q->entry->byte_size(), rows * cols / 64 * 4));
  } else {
    ++l.report().checked;
  }
}

void check_layer(Loader& l, const Shape& s, const std::string& p, std::uint64_t i, bool streamed) {
  const auto f = [&](const std::string& n) { l.float_tensor(p + n, 0); };
  for (const char* n :
       {"input_layernorm.weight", "post_attention_layernorm.weight", "hc_attn_fn", "hc_attn_base",
        "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale"}) {
    f(n);
  }
  if (s.linear[i]) {
    for (const char* n :
         {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "g_a_proj.weight",
          "g_b_proj.weight", "f_a_proj.weight", "f_b_proj.weight", "b_proj.weight", "dt_bias",
          "A_log", "o_norm.weight", "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
      f(fmt::format("self_attn.{}", n));
    }
  } else {
    for (const char* n :
         {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight",
          "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight", "indexer.wq_b.weight",
          "indexer.wk.weight", "indexer.weights_proj.weight", "indexer.k_norm.weight",
          "indexer.k_norm.bias"}) {
      f(fmt::format("self_attn.{}", n));
    }
    if (s.index_kpool) {
      f("self_attn.indexer.index_kpool_compress_ape");
      f("self_attn.indexer.index_kpool_compress_gate");
    }
  }
  if (i < s.first_dense) {
    for (const char* n : {"gate_proj", "up_proj", "down_proj"}) f(fmt::format("mlp.{}.weight", n));
    return;
  }
  f("mlp.gate.weight");
  for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
    f(fmt::format("mlp.shared_experts.{}.weight", n));
  }
  for (std::uint64_t e = 0; e < s.experts; ++e) {
    const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
    if (!streamed) {
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
        l.float_tensor(fmt::format("{}{}.weight", x, n), 0);
      }
      continue;
    }
    check_expert(l, x + "gate_proj", s.inter, s.hidden);
    check_expert(l, x + "up_proj", s.inter, s.hidden);
    check_expert(l, x + "down_proj", s.hidden, s.inter);
  }
}

}  // namespace

Status check_glm53(Loader& l, const Json& c) {
  auto& r = l.report();
  const Json& t = c.contains("text_config") && c["text_config"].is_object() ? c["text_config"] : c;
  Shape s{};
  s.layers = need(t, "num_hidden_layers", r);
  s.hidden = need(t, "hidden_size", r);
  s.experts = need(t, "n_routed_experts", r);
  s.inter = need(t, "moe_intermediate_size", r);
  s.index_kpool = need(t, "index_kpool", r, 1, false) > 1;
  if (!r.unloadable.empty() || !read_layout(t, r, s)) return ok_status();
  if (s.layers * (s.experts * 6 + 40) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  const std::string p =
      l.ck().find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  l.float_tensor(p + "embed_tokens.weight", 0);
  l.float_tensor(p + "norm.weight", 0);
  // Streaming is decided by the first sparse layer's expert 0: U8/I8 streams.
  const auto probe =
      l.ck().find(fmt::format("{}layers.{}.mlp.experts.0.gate_proj.weight", p, s.first_dense));
  const bool streamed =
      probe && (probe->entry->dtype == Dtype::kU8 || probe->entry->dtype == Dtype::kI8);
  for (std::uint64_t i = 0; i < s.layers; ++i) {
    check_layer(l, s, fmt::format("{}layers.{}.", p, i), i, streamed);
  }
  return ok_status();
}

}  // namespace qrepack
