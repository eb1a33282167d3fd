// Inkling's weights for the forward pass, in whichever of its layouts the checkpoint holds:
//   release    thinkingmachines/Inkling as published: model.llm.* names, every fused gate/up
//              (w13) tensor's rows interleaved gate 0, up 0, gate 1, up 1, ...
//   runtime    the names c/inkling.c loads (model.layers.*, lm_head): colibri-inkling's
//              container (routed experts as one U8 + .qs per projection per layer, per-row int4
//              or int8, gate rows then up rows per expert; residents BF16 / F32) or float 3-D
//              experts [E, 2I, D] / [E, D, I] as transformers saves them; with a
//              dense-int4g64/ directory beside the shards (colibri-inkling-dense), each resident
//              matrix found there as U8 + .qs is read from it, as load_w_quant prefers it.
// Every read checks the stored size against the config's shape before allocating.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/model/inkling_forward.h"
#include "qrepack/model/model_weights.h"

namespace qrepack::model {

/// A gated MLP's three matrices: gate [I, D], up [I, D], down [D, I].
struct GatedMlp {
  Matrix gate, up, down;
};

/// The matrices of one layer's attention, by the runtime's names.
enum class AttnMatrix : std::uint8_t { kQ, kK, kV, kR, kO };
/// The vectors a layer holds (norms, short-convolution kernels, the bias bank, router parts).
enum class LayerVector : std::uint8_t {
  kInputNorm,
  kPostNorm,
  kQNorm,
  kKNorm,
  kKConv,
  kVConv,
  kAttnConv,
  kMlpConv,
  kRelBank,
  kRouter,
  kRouterBias,
};

class InklingWeights {
 public:
  /// The checkpoint's weights `w` (and its dense-int4g64/ overlay, opened when the runtime
  /// layout has one).
  static Result<InklingWeights> make(ModelWeights w, const InklingConfig& c);

  const ModelWeights& weights() const { return w_; }
  bool release() const { return release_; }
  bool has_overlay() const { return overlay_.has_value(); }

  /// Rows [row0, row0 + n) of the embedding [vocab, D] and of lm_head [vocab, D].
  Result<Matrix> embedding(std::uint64_t row0, std::uint64_t n) const;
  Result<Matrix> head(std::uint64_t row0, std::uint64_t n) const;
  /// embed_norm (absent: nullopt, as inkling.c skips it) and the final norm.
  Result<std::optional<std::vector<float>>> embed_norm() const;
  Result<std::vector<float>> final_norm() const;

  Result<Matrix> attention(std::uint64_t layer, AttnMatrix m) const;
  Result<std::vector<float>> vector(std::uint64_t layer, LayerVector v) const;
  /// mlp.global_scale (dense) or mlp.gate.global_scale (MoE); 1 when absent.
  Result<float> global_scale(std::uint64_t layer) const;

  Result<GatedMlp> dense(std::uint64_t layer) const;
  Result<GatedMlp> expert(std::uint64_t layer, std::uint64_t e) const;
  Result<GatedMlp> shared_expert(std::uint64_t layer, std::uint64_t j) const;

 private:
  InklingWeights(ModelWeights w, std::optional<ModelWeights> overlay, bool release,
                 const InklingConfig& c)
      : w_(std::move(w)), overlay_(std::move(overlay)), release_(release), c_(c) {}
  /// Rows of a [rows, cols] matrix (a 3-D tensor's leading dims flattened) stored under
  /// `name`: from the overlay when it holds it quantized, a container's U8 + .qs, or floats.
  Result<Matrix> rows(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                      std::uint64_t row0, std::uint64_t n) const;
  /// Gate and up out of one block of 2I rows: interleaved (release) or gate rows first.
  GatedMlp split_gate_up(const Matrix& block, std::uint64_t inter) const;
  std::string layer_name(std::uint64_t layer, const char* release, const char* runtime) const;

  ModelWeights w_;
  std::optional<ModelWeights> overlay_;
  bool release_ = false;
  InklingConfig c_;
};

}  // namespace qrepack::model
