// Kimi K3's tensor contract as c/kimi_k3.c loads it (reference/colibri-engines.md §1.12, §3):
// the config keys its load_cfg requires, and for every text tensor its model_init reads the
// class k3_repack.py gives it and the shape the config implies. Names here are without the
// "language_model." prefix the release carries (the loader probes for it; so does the planner).
//   bits  q/k/v/o/g_proj of KDA layers, routed_expert_{down,up}_proj, shared_experts.*,
//         the dense layers' mlp.*                         quantized, upstream --bits (8)
//   mla   q_a/q_b/kv_a_with_mqa/kv_b/o/g_proj of MLA layers  upstream --mla-bits (max(bits, 8))
//   head  lm_head                                         upstream --head-bits (max(bits, 8))
//   float everything else the loader reads (norms, AttnRes, router, convs, f_a/f_b, b_proj,
//         dt_bias, A_log, embed): kept as stored, any of BF16 / F16 / F32, checked by count
//   expert block_sparse_moe.experts.E.w{1,2,3}.weight_{packed,scale}: MXFP4 U8 bytes
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

struct K3Dims {
  std::uint64_t hidden = 0, layers = 0, vocab = 0, first_dense = 0, dense_inter = 0;
  std::uint64_t heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v_head = 0;
  std::uint64_t experts = 0, topk = 0, moe_inter = 0, latent = 0, shared = 0, res_block = 0;
  std::uint64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 0;
  std::vector<bool> kda;  ///< per layer (linear_attn_config.kda_layers, 1-based)
  std::uint64_t kda_proj() const { return kda_heads * kda_head_dim; }
  bool sparse(std::uint64_t layer) const { return layer >= first_dense; }
};

/// Reads text_config (else the top level) as kimi_k3.c's load_cfg does, with its range checks;
/// stricter than it in one place: a kda_layers entry outside [1, num_hidden_layers] is refused
/// (the loader skips it, k3_repack.py would misclassify). Errors name the key; rule
/// kimi_k3.config.
Result<K3Dims> read_k3_dims(const nlohmann::json& config);

enum class K3Class : std::uint8_t { kBits, kMla, kHead, kFloat, kExpert };

/// What the contract says of one tensor: quantized classes and experts are [rows, cols] (an
/// expert's U8 bytes: [O, I/2] packed, [O, I/32] scales); float tensors hold rows elements
/// (cols 1), at least that many when `at_least` (A_log: the per-head vector zero-padded).
struct K3Expect {
  K3Class cls = K3Class::kFloat;
  std::uint64_t rows = 0, cols = 1;
  bool at_least = false;
};

/// The contract's entry for `name` (prefix stripped), or nullopt for a name the loader never
/// reads in this config.
std::optional<K3Expect> k3_expect(std::string_view name, const K3Dims& d);

/// Calls `fn` with every name (prefix stripped) the loader reads, experts included, and its
/// entry: globals, then layer by layer.
void for_each_k3_tensor(const K3Dims& d,
                        const std::function<void(const std::string&, const K3Expect&)>& fn);

/// For an expert tensor name "model.layers.L.block_sparse_moe.experts.E.wK.weight_<kind>":
/// (E, K - 1, 0 for packed / 1 for scale), k3_repack.py's expert_sort_key; nullopt otherwise.
std::optional<std::array<std::uint64_t, 3>> k3_expert_key(std::string_view name);

}  // namespace qrepack
