// The reference forward pass of Kimi K3 (model_type kimi_k3, text model kimi_linear with
// latent MoE and attention residuals), as its runtime c/kimi_k3.c computes it (docs/model.md
// "Kimi K3"; reference/colibri-engines.md §1.12):
//   AttnRes  the residual stream is a running prefix sum plus block snapshots (every
//            attn_res_block_size layers); before attention, before the MLP and before the
//            final norm the hidden state is a softmax mix of [snapshots..., prefix], scored by
//            v . (res_norm.w * res_proj.w) / rms(v)
//   KDA      Kimi Delta Attention on linear_attn_config.kda_layers (1-based): short convs,
//            per-key-channel decay gate_lower_bound * sigmoid(exp(A_log) (f_b f_a x + dt_bias)),
//            beta = sigmoid(b_proj x), the delta rule, per-head RMSNorm times sigmoid(g_proj x)
//   MLA      the other layers: MLA without rotary embeddings (NoPE), output gated by
//            sigmoid(g_proj x)
//   MLP      dense SiTU-GLU on the first first_k_dense_replace layers; then LatentMoE: sigmoid
//            router with e_score_correction_bias for the choice, top-k weights renormalized,
//            experts in the routed_expert_hidden_size latent between routed_expert_down_proj
//            and routed_expert_norm -> routed_expert_up_proj, plus the shared experts
// In f32 with a fixed evaluation order (bit-identical for any thread count); weights read one
// matrix (one expert) at a time through ModelWeights: BF16 / F16 / F32, the release's MXFP4
// experts (decoded exactly), colibri-kimi-k3's int8-row / int4-g64 containers.
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

/// Whether `model_type` (config.json's top level) is Kimi K3's.
bool is_kimi_k3_model_type(const std::string& model_type);

class KimiK3Forward : public ForwardModel {
 public:
  /// Opens the checkpoint at `path`; its config.json, or `fallback_config_dir`'s when it has
  /// none. Variants the pass does not implement are refused by name (rule forward.support)
  /// before any weight is read.
  static Result<KimiK3Forward> open(const std::string& path,
                                    const std::string& fallback_config_dir = "");
  KimiK3Forward(KimiK3Forward&&) noexcept;
  KimiK3Forward& operator=(KimiK3Forward&&) noexcept;
  ~KimiK3Forward() override;

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
  explicit KimiK3Forward(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
