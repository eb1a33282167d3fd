// config.json of GLM-5.3-Flash (model_type glm5_next / glm5_next_text) for the forward pass:
// the keys c/glm53.c's load_cfg reads (text_config, or the top level of a text-only export),
// with its defaults and range checks; variants the pass does not implement refused by name
// under forward.support, malformed values under forward.config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack::model {

struct Glm53Dims {
  std::uint64_t hidden = 0, layers = 0, vocab = 0, first_dense = 0, dense_inter = 0;
  std::uint64_t heads = 0, q_lora = 0, kv_lora = 0, nope = 0, v_head = 0;
  std::uint64_t experts = 0, topk = 0, moe_inter = 0, shared = 1;
  std::uint64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 0;
  std::uint64_t index_topk = 0, index_heads = 0, index_dim = 0, kpool = 1;
  bool kpool_tail = false;  ///< index_kpool_always_select_tail
  std::uint64_t hc_mult = 1, hc_iters = 0;
  std::vector<bool> full;  ///< per layer: MLA + DSA indexer (else KDA), from layer_types
  std::uint64_t kda_proj() const { return kda_heads * kda_head_dim; }
  bool sparse(std::uint64_t layer) const { return layer >= first_dense; }
};

struct Glm53ForwardConfig {
  std::string model_type;  ///< config.json's top level ("glm5_next" or "glm5_next_text")
  Glm53Dims d;
  double eps = 1e-6;  ///< rms_norm_eps
  float routed_scale = 1.0f, swiglu_limit = 0.0f, gate_lower_bound = -5.0f, hc_eps = 1e-6f;
  bool tied = false;  ///< tie_word_embeddings
};

/// Reads `dir`/config.json.
Result<Glm53ForwardConfig> load_glm53_forward_config(const std::string& dir);

}  // namespace qrepack::model
