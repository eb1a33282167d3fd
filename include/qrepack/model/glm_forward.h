// The reference forward pass of the GLM-MoE-DSA / DeepSeek-V3 family, as Hugging Face
// transformers defines it (modeling_glm_moe_dsa.py, modeling_deepseek_v3.py): embeddings;
// decoder layers of RMSNorm, MLA attention (q_a -> q_a_layernorm -> q_b or q_proj; the latent
// and rope parts of kv_a_proj_with_mqa; kv_a_layernorm; kv_b; rope; causal softmax), RMSNorm
// and a dense SwiGLU MLP or the routed MoE with shared experts; final norm; lm_head. In f32,
// deterministic for any thread count. docs/model.md says where it can differ from transformers.
//
// Memory: the pass runs layer by layer over all sequences at once, so it holds one weight
// matrix at a time (routed experts are read one by one, only those some token routes to) plus
// the activations; lm_head is read in row blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"
#include "qrepack/model/model_weights.h"

namespace qrepack {

/// Largest qk_rope_head_dim the forward pass takes (real models use 64).
inline constexpr std::uint64_t kMaxRopeDim = 1024;

/// Refuses what the forward pass does not implement, naming it: rope types other than
/// "default", more experts per group than the routing supports, and the like.
Status check_forward_support(const MoeConfig& c);

class GlmForward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s when it has
  /// none (a converted output without its config).
  static Result<GlmForward> open(const std::string& path,
                                 const std::string& fallback_config_dir = "");
  GlmForward(GlmForward&&) noexcept;
  GlmForward& operator=(GlmForward&&) noexcept;
  ~GlmForward() override;

  const MoeConfig& config() const;
  const std::string& model_type() const override;
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;

  /// Teacher-forced logits: for each sequence a [T x vocab] matrix, row t predicting token
  /// t + 1. Ids must be < vocab_size; a sequence longer than index_topk is refused (the DSA
  /// indexer would select keys; below that it selects every key and attention is dense).
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;

 private:
  struct State;
  explicit GlmForward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
