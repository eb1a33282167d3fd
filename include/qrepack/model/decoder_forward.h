// The reference forward passes of the GQA decoder families, as transformers defines them:
//   llama        LlamaForCausalLM: RMSNorm, GQA with split-half rope ("default" or "llama3"
//                scaling, partial_rotary_factor), SwiGLU MLP
//   qwen3        Qwen3ForCausalLM: llama + per-head q_norm / k_norm before rope
//   qwen3_moe    Qwen3MoeForCausalLM: qwen3 attention, softmax top-k experts
//   olmoe        OlmoeForCausalLM: q_norm / k_norm over the whole projections, clip_qkv,
//                softmax top-k experts
//   qwen3_5_moe  Qwen3.5 / 3.6-MoE (text model, also a container's flattened
//                qwen3_5_moe_text): per layer_types a Gated DeltaNet layer (linear_attn.*:
//                causal depthwise conv, the gated delta rule, gated RMSNorm) or gated
//                attention (q_proj emits query | gate per head; partial rotary), RMSNorms as
//                x * (1 + w), routed experts plus a shared expert behind a sigmoid gate.
// In f32 with a fixed evaluation order (bit-identical for any thread count); weights are read
// one matrix (one expert) at a time through ModelWeights, so any source encoding and the
// runtimes' containers (per-row / grouped int4 and int8, merged expert blobs) are read too.
// docs/model.md says where it can differ from transformers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"

namespace qrepack {

enum class DecoderArch : std::uint8_t { kLlama, kQwen3, kQwen3Moe, kOlmoe, kQwen35Moe };

struct DecoderConfig {
  DecoderArch arch = DecoderArch::kLlama;
  std::string model_type;
  std::uint64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::uint64_t heads = 0, kv_heads = 0, head_dim = 0;
  std::uint64_t intermediate_size = 0;  ///< dense MLP
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::uint64_t rotary_dim = 0;  ///< even, <= head_dim (partial_rotary_factor)
  /// rope_scaling "llama3": factor, low_freq_factor, high_freq_factor,
  /// original_max_position_embeddings; factor 0 when absent.
  double llama3_factor = 0, llama3_low = 0, llama3_high = 0, llama3_original = 0;
  bool attention_bias = false;
  enum class QkNorm : std::uint8_t { kNone, kPerHead, kWhole } qk_norm = QkNorm::kNone;
  bool zero_centered_norms = false;  ///< RMSNorm weight applied as (1 + w)
  bool attn_output_gate = false;     ///< q_proj emits [query | gate] per head
  double clip_qkv = 0;               ///< 0: none
  bool tie_word_embeddings = false;
  // Routed experts (0: a dense model).
  std::uint64_t experts = 0, experts_per_tok = 0, moe_intermediate_size = 0;
  std::uint64_t shared_expert_intermediate_size = 0;  ///< 0: no shared expert
  bool norm_topk_prob = false;
  std::vector<bool> moe_layer;     ///< per layer: routed experts (else the dense MLP)
  std::vector<bool> linear_layer;  ///< per layer: Gated DeltaNet (else attention)
  // Gated DeltaNet.
  std::uint64_t conv_kernel = 0, key_heads = 0, key_head_dim = 0, value_heads = 0,
                value_head_dim = 0;
};

/// The model_types DecoderForward implements (a container's "qwen3_5_moe_text" included).
bool is_decoder_model_type(const std::string& model_type);

/// Reads `dir`/config.json (text_config when the top level wraps one). Every dimension is
/// bounded (kMaxDim); a variant the pass does not implement (another rope type, DeltaNet head
/// counts that do not divide, ...) is refused by name under rule forward.support.
Result<DecoderConfig> load_decoder_config(const std::string& dir);

class DecoderForward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s.
  static Result<DecoderForward> open(const std::string& path,
                                     const std::string& fallback_config_dir = "");
  DecoderForward(DecoderForward&&) noexcept;
  DecoderForward& operator=(DecoderForward&&) noexcept;
  ~DecoderForward() override;

  const DecoderConfig& config() const;
  const std::string& model_type() const override;
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;

  /// ref_qwen36.json's "attention_only" mode (make_qwen36_tiny.py): every linear_attention
  /// layer is the identity (its mixer and its MLP both contribute zeros).
  void set_attention_only(bool on);

  struct State;

 private:
  explicit DecoderForward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
