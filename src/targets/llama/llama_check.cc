// check-load of colibri-llama: what c/llama.c's loader refuses (check_load_target).
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {

Status check_llama(Loader& l, const Json& c) {
  auto& r = l.report();
  if (!c.contains("model_type") || c["model_type"] != "llama") {
    r.unloadable.push_back("config.json: model_type is not \"llama\"");
  }
  for (const char* b : {"attention_bias", "mlp_bias"}) {
    if (c.contains(b) && c[b].is_boolean() && c[b].get<bool>()) {
      r.unloadable.push_back(fmt::format("config.json: {} is not supported by llama.c", b));
    }
  }
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t h = need(c, "num_attention_heads", r), f = need(c, "intermediate_size", r);
  const std::uint64_t v = need(c, "vocab_size", r);
  const std::uint64_t kv = need(c, "num_key_value_heads", r, h, false);
  const std::uint64_t hd = need(c, "head_dim", r, h ? d / h : 0, false);
  if (!r.unloadable.empty()) return ok_status();
  if (kv == 0 || h % kv != 0 || hd % 2 != 0 || hd < 2) {
    r.unloadable.push_back("config.json: heads, kv heads and head_dim do not fit llama.c");
    return ok_status();
  }
  const bool tied = c.contains("tie_word_embeddings") && c["tie_word_embeddings"] == true;
  l.float_tensor("model.embed_tokens.weight", v * d);
  l.float_tensor("model.norm.weight", d);
  if (!tied) l.float_tensor("lm_head.weight", v * d);
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    l.float_tensor(p + "self_attn.q_proj.weight", h * hd * d);
    l.float_tensor(p + "self_attn.k_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.v_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.o_proj.weight", d * h * hd);
    l.float_tensor(p + "mlp.gate_proj.weight", f * d);
    l.float_tensor(p + "mlp.up_proj.weight", f * d);
    l.float_tensor(p + "mlp.down_proj.weight", d * f);
  }
  return ok_status();
}

}  // namespace qrepack
