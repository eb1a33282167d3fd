// `qrepack check`: how well E0M3 serves an Omega layer, measured on the CPU with the bit-exact
// quantizer (reference/flashrt_omega.md §4.1). Synthetic activations are built per layer
// (lognormal channel gains, K/128 + 1 outlier channels x10, rotated with the record's perm and
// blocks, calibrated so each channel's q99.9 equals 7 * s_t); every candidate is compared with
// the fp32 reference y_fp = x2 W^T by global and per-token cosine. The output rotation is
// skipped on every side: cosines are invariant to it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/safetensors.h"
#include "qrepack/io/torch_pt.h"

namespace qrepack {

inline constexpr const char* kDefaultCheckLayer =
    "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj";

struct CheckOptions {
  std::string layer = kDefaultCheckLayer;
  std::uint64_t tokens = 256;
  std::uint64_t step = 0;  ///< row of act_scale_table used as s_t
  std::uint64_t seed = 0;
  bool s1 = false;  ///< also the mean-fold candidate
  /// Also FlashRT's checker emulation (omega/flashrt_emulate.h) of S0 (and S1 with s1), so a
  /// report made by that checker can be compared; the exact rows stay.
  bool emulate_flashrt = false;
  /// Artifact mode: the artifact was already validated against the pack (check --all checks
  /// every layer of one artifact and validates it once).
  bool artifact_validated = false;
};

struct CosineStats {
  double global = 0;      ///< over the flattened outputs
  double token_mean = 0;  ///< per token (output row), mean
  double token_min = 0;   ///< per token, min
};

struct CheckRow {
  std::string variant;
  CosineStats cos;
};

struct LayerCheck {
  std::string layer;
  std::uint64_t n = 0, k = 0, steps = 0;
  std::vector<CheckRow> rows;
  /// Artifact mode: B bytes (packed + sfb) that differ from qrepack's own quantization of the
  /// record with the artifact's fold (0 = identical).
  std::optional<std::uint64_t> artifact_byte_diffs;
};

/// Emulate mode: Omega fake quant (clamp(rint(x/s_t), -8, 7) * s_t), S0 = e0m3(x2) x e0m3(W),
/// and with o.s1 S1 = e0m3(x2 / s_t) x e0m3(W * mean_t s).
Result<LayerCheck> check_layer_emulate(const TorchFile& pack, const CheckOptions& o);

/// Artifact mode: the artifact is validated against the pack, then the GEMM is computed from
/// its stored packed + sfb bytes for o.layer (activations by the artifact's fold: none -> x2,
/// mean -> x2 / s_t), against y_fp. The row "artifact" carries the gated cosine.
Result<LayerCheck> check_layer_artifact(const TorchFile& pack, const TorchFile& artifact,
                                        const CheckOptions& o);

/// The artifact's structure against the pack (§4.1 validate_artifact): format omega_e0m3_v1,
/// schema_version 1, weights / aux dicts and selected_layers covering the same set with
/// selected_record_count its size, every layer a pack record with matching N and K, packed
/// uint8 [N, K/2], sfb uint8 [sf_sm1xx_size(N, K)], fold none or mean and equal to aux.fold.
/// Every problem is reported.
Status validate_e0m3_artifact(const TorchFile& artifact, const TorchFile& pack);

/// What an artifact's layers are checked against: N and K of the source weight a layer name
/// names (nullopt: the source has none), and words for messages ("pack", "record ...").
struct E0m3Source {
  std::string kind, what;
  std::function<std::optional<std::pair<std::uint64_t, std::uint64_t>>(const std::string&)>
      shape_of;
};

/// The same rules against any source. schema_version, selected_layers and
/// selected_record_count are checked when present and may be absent (FlashRT's PR #179
/// converter and its fork's QAT converter write none): the layers are then the weights' names.
Status validate_e0m3_artifact(const TorchFile& artifact, const E0m3Source& source);

/// The `weights` entry of `layer` in a validated artifact; kRecordCount (rule
/// omega.artifact) naming the layer when the artifact has none.
Result<const PtValue*> e0m3_artifact_layer(const TorchFile& artifact, const std::string& layer);

/// The schema fields the artifact lacks, of schema_version, selected_layers and
/// selected_record_count (reported, not refused).
std::vector<std::string> e0m3_artifact_missing_metadata(const TorchFile& artifact);

/// A QAT artifact (docs/formats/omega-e0m3.md §8) against its checkpoint `ck`: validated with
/// the checkpoint's expert weights as the source, its aux rotations the identity, fold none;
/// then the layer's GEMM from the stored bytes, e0m3(x) x stored B, against y_fp = x W^T with
/// W the checkpoint's weight in fp16 and x the synthetic activations unrotated and
/// uncalibrated (the QAT model has no rotation and no table).
Result<LayerCheck> check_layer_qat_artifact(const SafetensorsFile& ck, const TorchFile& artifact,
                                            const CheckOptions& o);

/// validate_e0m3_artifact against a QAT checkpoint, plus the identity aux of every layer.
Status validate_qat_artifact(const TorchFile& artifact, const SafetensorsFile& ck);

}  // namespace qrepack
