// The reference forward pass of Qwen3.8-Flash-Next (model_type qwen4_exp, text model
// qwen4_exp_text), as its runtime c/qwen38_core.h computes it (docs/model.md
// "Qwen3.8-Flash-Next"; reference/colibri-engines.md §1.16, §3):
//   residual  hc_count hyper-streams mixed by gated-residual hyper-connections before each block
//             and by the final hyper_connection_mixer before lm_head (not GLM's mHC)
//   GDN       linear_attention layers: Gated DeltaNet (in_proj_qkv / z / b / a, causal conv,
//             the delta rule with a scalar decay per value head, RMSNorm times sigmoid(z))
//   QSA       qwen_sparse_attention layers: gated GQA over the positions its indexer selects
//             (whole blocks of indexer_compress_ratio by pooled-key score, up to
//             indexer_budget, plus the tail), partial rotary
//   PLE       the per-layer embedding of ple_layer_ids[0]: hashed 2- and 3-gram rows of the
//             n-gram table, gated per stream and passed through a dilated causal conv
//   MoE       every layer: softmax router, top-k (renormalized when norm_topk_prob), SwiGLU
//             experts, plus the shared expert scaled by sigmoid(shared_expert_gate x)
// MTP (mtp.*) and the vision tower (model.visual.*) are not read, as the runtime's text path
// does not read them. In f32 with a fixed evaluation order (bit-identical for any thread
// count); weights read one matrix (one expert) at a time: the BF16 release (fused experts), the
// official FP8 release (F8_E4M3 experts with BF16 128x128 scales), colibri-qwen38-int4's
// experts-only overlay and the colibri-qwen38-experts-int4g64 sidecar, each read together with
// the release directory it sits beside.
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

/// Whether `model_type` (config.json's top level) is Qwen3.8-Flash-Next's.
bool is_qwen38_model_type(const std::string& model_type);

/// Whether `dir` is an experts-only Qwen3.8 directory without a config.json: a
/// colibri-qwen38-experts-int4g64 sidecar (its index.json names the format; its snapshot is
/// its parent) or a colibri-qwen38-int4 overlay (its qwen38_meta.json).
bool is_qwen38_experts_directory(const std::string& dir);

class Qwen38Forward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`: a release directory (its config.json), or an experts-only
  /// overlay / sidecar directory whose release is `fallback_config_dir` (a sidecar's parent
  /// when none is given). Variants the pass does not implement are refused by name (rule
  /// forward.support) before any weight is read.
  static Result<Qwen38Forward> open(const std::string& path,
                                    const std::string& fallback_config_dir = "");
  Qwen38Forward(Qwen38Forward&&) noexcept;
  Qwen38Forward& operator=(Qwen38Forward&&) noexcept;
  ~Qwen38Forward() override;

  const std::string& model_type() const override;
  std::uint64_t vocab_size() const override;
  std::uint64_t hidden_size() const override;
  std::uint64_t layer_count() const override;
  /// The release directory (its config.json), also for an overlay or a sidecar.
  const std::string& directory() const override;
  std::vector<std::string> input_files() const override;
  void set_cache_budget(std::uint64_t bytes) override;
  void set_progress(std::function<void(std::string_view)> progress) override;
  Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) override;
  /// The final mixer's output (what lm_head reads) of the last logits() call, per sequence.
  const std::vector<Matrix>* final_hidden() const override;

 private:
  struct State;
  explicit Qwen38Forward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
