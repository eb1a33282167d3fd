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
#include "qrepack/model/model_weights.h"

namespace qrepack {

/// Largest qk_rope_head_dim the forward pass takes (real models use 64).
inline constexpr std::uint64_t kMaxRopeDim = 1024;

/// Refuses what the forward pass does not implement, naming it: rope types other than
/// "default", more experts per group than the routing supports, and the like.
Status check_forward_support(const MoeConfig& c);

/// Token ids of one sequence.
using TokenIds = std::vector<std::uint32_t>;

class GlmForward {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s when it has
  /// none (a converted output without its config).
  static Result<GlmForward> open(const std::string& path,
                                 const std::string& fallback_config_dir = "");
  GlmForward(GlmForward&&) noexcept;
  GlmForward& operator=(GlmForward&&) noexcept;
  ~GlmForward();

  const MoeConfig& config() const;
  /// Directory of the checkpoint (its config.json lives here).
  const std::string& directory() const;
  /// The checkpoint's files and its config.json (what an output must never replace).
  std::vector<std::string> input_files() const;
  /// Keeps decoded weights in memory up to this many bytes (greedy generation runs the whole
  /// model once per token); 0 (the default) keeps none.
  void set_cache_budget(std::uint64_t bytes);
  /// Called with a short description of each layer as the pass reaches it.
  void set_progress(std::function<void(std::string_view)> progress);

  /// Teacher-forced logits: for each sequence a [T x vocab] matrix, row t predicting token
  /// t + 1. Ids must be < vocab_size; a sequence longer than index_topk is refused (the DSA
  /// indexer would select keys; below that it selects every key and attention is dense).
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs);

  /// Greedy continuation: `n` more ids after `prompt` (argmax, first on ties).
  Result<TokenIds> generate(const TokenIds& prompt, std::uint64_t n);

 private:
  struct State;
  explicit GlmForward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
