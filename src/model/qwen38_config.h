// config.json of Qwen3.8-Flash-Next (model_type qwen4_exp, text model qwen4_exp_text) for the
// forward pass: the numbers c/qwen38_core.h's q38_load_cfg reads (text_config when present, else
// the root) with q38_validate_cfg's range rules, and the variants the pass does not implement
// refused by name under forward.support (those the runtime refuses too).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack::model {

struct Q38ForwardConfig {
  std::string model_type;  ///< config.json's top level ("qwen4_exp", or "qwen4_exp_text")
  std::uint64_t hidden = 0, layers = 0, vocab = 0, eos = 0;
  double eps = 1e-6, theta = 10000;
  std::uint64_t hc = 4, hc_rank = 0;  ///< hc_count streams, hc_lowrank
  std::uint64_t heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  std::uint64_t idx_heads = 0, idx_dim = 0, idx_budget = 0, idx_ratio = 0;
  std::uint64_t experts = 0, topk = 0, inter = 0, shared_inter = 0;
  bool norm_topk = true;
  std::uint64_t dn_key_heads = 0, dn_value_heads = 0, dn_key_dim = 0, dn_value_dim = 0;
  std::uint64_t dn_kernel = 0;
  std::uint64_t ple_layer = 0;  ///< 0-based (config's ple_layer_ids[0] - 1)
  std::uint64_t ple_dim = 0, ple_kernel = 4, heads_per_ngram = 0, ngram_parts = 1;
  bool fp8_quantization = false;  ///< quantization_config names fp8 (the official release)
  std::vector<bool> attention;    ///< per layer: sparse attention (else Gated DeltaNet)
  std::vector<std::string> layer_types;

  std::uint64_t wide() const { return hc * hidden; }                 ///< the hyper-stream width
  std::uint64_t ngram_heads() const { return 2 * heads_per_ngram; }  ///< (ngram_size - 1) x
  std::uint64_t ngram_dim() const { return ple_dim / ngram_heads(); }
  std::uint64_t dn_conv_channels() const {
    return 2 * dn_key_heads * dn_key_dim + dn_value_heads * dn_value_dim;
  }
};

/// Reads `dir`/config.json.
Result<Q38ForwardConfig> load_q38_forward_config(const std::string& dir);

}  // namespace qrepack::model
