// Qwen3.8-Flash-Next's weights for the forward pass, as c/qwen38_core.h finds them: the text
// prefix model.language_model. (the release) or model. (the text-only fixture), whichever holds
// embed_tokens; dense weights BF16 / F16 / F32; the routed experts from one of
//   release   fused gate_up_proj [E, 2I, H] (gate rows first) + down_proj [E, H, I] (BF16
//             release), or per expert gate/up/down: F8_E4M3 times a BF16 / F16 / F32 128x128
//             weight_scale_inv (the official FP8 release), or float
//   overlay   colibri-qwen38-int4 (convert_qwen38_int4.py, Q38_INT4_SNAP): per expert one U8
//             merged_weight (gate | up | down, offset-binary nibbles, element 2k low) + F32 qs
//             (gate | up | down, each [O][I/gs]); every other weight from the release directory
//             the runtime mounts beside it
//   sidecar   colibri-qwen38-experts-int4g64 (<snapshot>/experts-int4g64/, Q38_EXPERT_INT4): per
//             expert and projection U8 codes [O, ceil(I/2)] "planar64-v8" (per 64 inputs 32
//             bytes, byte k = code k | code k+32 << 4; a tail in pairs, element 2k low; offset
//             binary) + F32 scales [O, ceil(I/64)] under <name>.weight.qs
// Every int4 weight decodes as (code - 8) x scale in f32.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "model/decoder_experts.h"
#include "model/forward_common.h"
#include "qrepack/core/error.h"

namespace qrepack::model {

enum class Q38ExpertStore : std::uint8_t { kRelease, kOverlay, kSidecar };

/// The sidecar's index format (index.json "format"), which tells its directory apart.
inline constexpr const char* kQ38SidecarFormat = "colibri.qwen38.experts-int4g64";

/// Whether `dir` holds a sidecar index.json naming kQ38SidecarFormat.
bool is_q38_sidecar_dir(const std::string& dir);

class Q38Weights {
 public:
  /// `base`: the release directory's weights; `experts`: the overlay's or the sidecar's, when
  /// `store` names one.
  static Result<Q38Weights> make(ModelWeights base, std::optional<ModelWeights> experts,
                                 Q38ExpertStore store, std::uint64_t hidden, std::uint64_t inter,
                                 std::uint64_t n_experts);

  WeightCache& cache() { return w_; }
  const ModelWeights& base() const { return w_.weights(); }
  const std::string& prefix() const { return pfx_; }  ///< "model.language_model." or "model."
  Q38ExpertStore store() const { return store_; }
  std::vector<std::string> files() const;

  /// A text-model matrix / vector by its name after the prefix.
  Result<std::shared_ptr<const Matrix>> get(const std::string& name, std::uint64_t rows,
                                            std::uint64_t cols) {
    return w_.get(pfx_ + name, rows, cols);
  }
  Result<std::shared_ptr<const Matrix>> vec(const std::string& name, std::uint64_t n) {
    return w_.vec(pfx_ + name, n);
  }
  /// A float tensor of any rank holding `n` values (a conv kernel [C, 1, K]).
  Result<std::vector<float>> floats(const std::string& name, std::uint64_t n) const {
    return w_.weights().read_floats(pfx_ + name, n);
  }

  /// Routed expert `e` of text layer `layer`.
  Result<ExpertMatrices> expert(std::uint64_t layer, std::uint64_t e);

 private:
  Q38Weights(WeightCache w, std::unique_ptr<ModelWeights> experts, Q38ExpertStore store)
      : w_(std::move(w)), experts_(std::move(experts)), store_(store) {}
  Result<ExpertMatrices> release_expert(std::uint64_t layer, std::uint64_t e) const;
  Result<Matrix> sidecar_matrix(const std::string& name, std::uint64_t rows,
                                std::uint64_t cols) const;

  WeightCache w_;
  std::unique_ptr<ModelWeights> experts_;  ///< on the heap: overlay_ points at it
  Q38ExpertStore store_;
  std::string pfx_;
  std::uint64_t hidden_ = 0, inter_ = 0, n_experts_ = 0;
  ExpertSource overlay_;
};

}  // namespace qrepack::model
