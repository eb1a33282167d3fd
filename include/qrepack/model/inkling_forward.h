// The reference forward pass of Inkling's text model (thinkingmachines/Inkling), as the
// runtime c/inkling.c computes it (docs/model.md "Inkling"):
//   embed_tokens rows, RMSNorm'd by embed_norm when the checkpoint has one; per layer
//   x += sconv(attn(rmsnorm(x))), x += sconv(mlp(rmsnorm(x))) with depthwise causal short
//   convolutions (kernel sconv_kernel_size, the input added back);
//   attention: sliding-window or global layers with their own head counts, no rope; K and V
//   through their own short convolutions, then per-head q / k RMSNorms; scores q.k / head_dim
//   plus a relative bias per backward distance (r_proj's d_rel values per head mixing the
//   layer's rel_logits_proj bank), times the log-length factor tau on global layers;
//   dense MLP layers (times mlp.global_scale) or MoE layers: a sigmoid router over the routed
//   and shared experts, the top-k routed chosen with e_score_correction_bias, the weights of
//   the chosen and the shared experts normalized together, times route_scale and
//   gate.global_scale; SiLU gated experts;
//   the final norm, divided by logits_mup_width_multiplier, the first unpadded_vocab_size rows
//   of lm_head.
// Weights: the release layout (model.llm.* names, gate/up rows interleaved) or the names
// inkling.c loads (colibri-inkling's container: routed experts per-row int4 / int8 U8 + .qs;
// float 3-D experts as transformers saves them), with the optional dense-int4g64/ overlay the
// runtime prefers for its resident matrices. The audio and vision towers and the MTP head are
// not part of the text model. f32, a fixed evaluation order, bit-identical for any thread
// count; one matrix (one expert) read at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"

namespace qrepack {

struct InklingConfig {
  std::string model_type;
  std::uint64_t hidden = 0, layers = 0, vocab = 0, unpadded_vocab = 0;
  std::uint64_t heads = 0, kv = 0, head_dim = 0;              ///< global layers
  std::uint64_t swa_heads = 0, swa_kv = 0, swa_head_dim = 0;  ///< sliding layers
  std::uint64_t window = 0, d_rel = 0, rel_extent = 0, conv_kernel = 0;
  std::uint64_t experts = 0, shared = 0, top_k = 0, moe_inter = 0, dense_inter = 0;
  float eps = 1e-6f, route_scale = 8.0f, mup = 24.0f;
  double log_floor = 0;  ///< log_scaling_n_floor; 0: no log-length scaling
  float log_alpha = 0.1f;
  std::vector<bool> sliding, sparse;  ///< per layer

  std::uint64_t heads_of(std::uint64_t l) const { return sliding[l] ? swa_heads : heads; }
  std::uint64_t kv_of(std::uint64_t l) const { return sliding[l] ? swa_kv : kv; }
  std::uint64_t head_dim_of(std::uint64_t l) const { return sliding[l] ? swa_head_dim : head_dim; }
  /// The relative-bias bank's extent: the window on sliding layers.
  std::uint64_t extent_of(std::uint64_t l) const { return sliding[l] ? window : rel_extent; }
};

/// inkling_mm_model (the release), inkling, inkling_text (its text config).
bool is_inkling_model_type(const std::string& model_type);

/// Reads `dir`/config.json (text_config when the top level wraps one) as inkling.c's load_cfg
/// does, strictly: every key a shape depends on is required, layer_types / mlp_layer_types list
/// every layer, the scalars take the runtime's defaults (rms_norm_eps 1e-6, route_scale 8,
/// logits_mup_width_multiplier 24, log scaling off, log_scaling_alpha 0.1). A variant the pass
/// does not implement (another activation, heads that do not share key/value heads evenly) is
/// refused by name under rule forward.support.
Result<InklingConfig> load_inkling_config(const std::string& dir);

class InklingForward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s.
  static Result<InklingForward> open(const std::string& path,
                                     const std::string& fallback_config_dir = "");
  InklingForward(InklingForward&&) noexcept;
  InklingForward& operator=(InklingForward&&) noexcept;
  ~InklingForward() override;

  const InklingConfig& config() const;
  const std::string& model_type() const override;
  /// unpadded_vocab_size: the logits' width (ids up to vocab_size are embedded).
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;
  /// Whether resident matrices come from a dense-int4g64/ overlay beside the checkpoint.
  bool uses_dense_overlay() const;

  struct State;

 private:
  explicit InklingForward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
