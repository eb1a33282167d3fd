// The reference forward pass of GLM-5.3-Flash (model_type glm5_next / glm5_next_text), the text
// model as its runtime c/glm53.c computes it (docs/model.md "GLM-5.3-Flash";
// reference/colibri-engines.md §1.3):
//   mHC      hc_mult residual streams (the embedding copied into each); before attention and
//            before the MLP a hyper-connection site (hc_{attn,ffn}_{fn,base,scale}) collapses
//            them into the block input and writes the block output back (model/
//            hyper_connections.h); after the last layer their plain mean is normed
//   KDA      Kimi Delta Attention on the "linear_attention" layers: short convs, per-key decay
//            gate_lower_bound * sigmoid(exp(A_log) (f_b f_a x + dt_bias)), beta = sigmoid(b_proj
//            x), the delta rule, per-head RMSNorm times sigmoid(g_b g_a x) (a low-rank gate)
//   MLA+DSA  the other layers: NoPE MLA whose queries attend only the tokens the DSA indexer
//            selects with k-pooling (model/dsa_indexer.h), at every length
//   MLP      SwiGLU clamped at swiglu_limit; dense on the first first_k_dense_replace layers,
//            then MoE: sigmoid router with e_score_correction_bias for the choice, top-k
//            weights renormalized times routed_scaling_factor, plus the shared expert
// The MTP layer (index num_hidden_layers) and the vision tower are not run.
// In f32 with a fixed evaluation order (bit-identical for any thread count); weights read one
// matrix (one expert) at a time through ModelWeights: BF16 / F32, the release's FP8 128x128
// block-scaled weights, colibri-glm53's int4-g64 experts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"

namespace qrepack {

/// Whether `model_type` (config.json's top level) is GLM-5.3-Flash's.
bool is_glm53_model_type(const std::string& model_type);

class Glm53Forward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s when it has
  /// none. Variants the pass does not implement are refused by name (rule forward.support)
  /// before any weight is read.
  static Result<Glm53Forward> open(const std::string& path,
                                   const std::string& fallback_config_dir = "");
  Glm53Forward(Glm53Forward&&) noexcept;
  Glm53Forward& operator=(Glm53Forward&&) noexcept;
  ~Glm53Forward() override;

  const std::string& model_type() const override;
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;

 private:
  struct State;
  explicit Glm53Forward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
