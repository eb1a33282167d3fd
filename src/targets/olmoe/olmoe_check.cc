// check-load of colibri-olmoe: what c/olmoe.c's loader refuses (check_load_target).
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {

Status check_olmoe(Loader& l, const Json& c) {
  auto& r = l.report();
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t e = need(c, "num_experts", r), inter = need(c, "intermediate_size", r);
  for (const char* k :
       {"num_attention_heads", "num_key_value_heads", "num_experts_per_tok", "vocab_size"}) {
    need(c, k, r);
  }
  if (!r.unloadable.empty()) return ok_status();
  // Dense tensors: looked up by name, any float dtype, no element count (olmoe.c's load_t).
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
    l.float_tensor(n, 0);
  }
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    for (const char* n :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate.weight"}) {
      l.float_tensor(p + n, 0);
    }
    for (std::uint64_t x = 0; x < e; ++x) {
      merged_expert(l, fmt::format("{}mlp.experts.{}.", p, x), {3 * inter * d},
                    [&](std::uint64_t) { return 2 * inter + d; });
    }
  }
  return ok_status();
}

}  // namespace qrepack
