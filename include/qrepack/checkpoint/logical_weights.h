// Recognize: raw tensors -> logical weights, in the engine's names (the family's name map
// applied). Source encodings (docs/formats/source-encodings.md, reference/formats.md §4, §6):
//   FP8 block     F8_E4M3 weight + "<name>_scale_inv" F32 or F8_E8M0 (UE8M0) block multipliers
//   FP8 tensor    F8_E4M3 weight + "<p>.weight_scale" F32 scalar multiplier
//   NVFP4         ModelOpt: U8 "<p>.weight" [O, I/2] + F8_E4M3 "<p>.weight_scale" [O, I/16] +
//                 F32 "<p>.weight_scale_2" (multiplied); compressed-tensors: "<p>.weight_packed"
//                 + "<p>.weight_scale" + "<p>.weight_global_scale" (divided). The convention
//                 comes from config.json's quantization_config, never from a guess.
//   FP8 tile      F8_E4M3 "<p>.weight" + F8_E8M0 "<p>.scale" (DeepSeek V4 / V4.1 naming): one UE8M0
//                 per 128x128 block, 32x32 tile or row group of 32, told apart by the scale's shape
//   MXFP4         E2M1 pairs [O, I/2] times one UE8M0 per row group of 32: compressed-tensors
//                 "<p>.weight_packed" U8 + "<p>.weight_scale" U8 (Kimi K3), or DeepSeek's
//                 "<p>.weight" I8 + "<p>.scale" F8_E8M0
//   int4 (CT)     compressed-tensors pack-quantized: "<p>.weight_packed" I32 [O, I/8] (eight
//                 offset-binary nibbles per word, lowest column in the low bits) +
//                 "<p>.weight_scale" BF16 / F16 / F32 [O, ceil(I/g)] + "<p>.weight_shape" [2] (Kimi
//                 K2)
//   MLX affine    mlx-community: U32 "<p>.weight" [O, I * bits / 32] + "<p>.scales" and
//                 "<p>.biases" [O, I / group]; w = scale * q + bias; bits (2, 4, 8) and group from
//                 config.json's "quantization" block (mlx-lm's stacked switch_mlp experts too)
//   float         F16 / BF16 / F32 / F64
// A fused 3-D expert tensor (HF `mlp.experts.gate_up_proj` [E, 2M, I] / `down_proj` [E, D, M])
// is 2E or E logical 2-D weights named as the engine names them. Every raw tensor ends up in
// exactly one logical weight, as a consumed sidecar, dropped by a named rule, or in the
// unclaimed list (never silently skipped).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/arena.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

enum class SourceEncoding : std::uint8_t {
  kFloat,       ///< F16 / BF16 / F32 / F64 elements
  kFp8Block,    ///< F8_E4M3 elements times a block scale (F32 or UE8M0)
  kFp8Tensor,   ///< F8_E4M3 elements times one per-tensor F32 scale
  kNvfp4,       ///< E2M1 pairs times UE4M3 per-16 scales, times or divided by a global scale
  kMxfp4,       ///< E2M1 pairs times one UE8M0 per row group of 32
  kInt4Packed,  ///< compressed-tensors int4: (nibble - 8) times a per-group float scale
  kMlxAffine,   ///< MLX affine: unsigned code times a per-group scale plus a per-group bias
};

/// "fp8-block", "fp8-block-ue8m0", "fp8-block32x32-ue8m0", "fp8-block-bf16", "fp8-tensor",
/// "nvfp4-modelopt", "nvfp4-ct", "mxfp4", "int4-ct", "mlx-affine", "bf16", ...
std::string source_encoding_name(const struct LogicalWeight& w);

/// The sidecar tensors a weight consumes, held inline: at most two (FP8: its scale; NVFP4: its
/// block and global scales; MXFP4 and int4 (CT): the scales and the weight_shape tensor).
struct Sidecars {
  std::array<TensorRef, 2> refs{};
  std::uint8_t count = 0;
  const TensorRef* begin() const { return refs.data(); }
  const TensorRef* end() const { return refs.data() + count; }
  std::size_t size() const { return count; }
  /// Adds t; aborts (an internal contract) past two.
  void push_back(const TensorRef& t);
};

/// A weight's logical shape, held inline: recognition makes weights of rank 2 at most (larger
/// tensors are fused experts, split, or unclaimed).
class WeightShape {
 public:
  WeightShape() = default;
  /// Aborts (an internal contract) above rank 2.
  WeightShape(std::span<const std::uint64_t> dims);  // NOLINT(google-explicit-constructor)
  std::size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  std::uint64_t operator[](std::size_t i) const { return dims_[i]; }
  std::uint64_t& operator[](std::size_t i) { return dims_[i]; }
  std::uint64_t back() const { return dims_[rank_ - 1]; }
  const std::uint64_t* begin() const { return dims_.data(); }
  const std::uint64_t* end() const { return dims_.data() + rank_; }
  operator std::vector<std::uint64_t>() const { return {begin(), end()}; }      // NOLINT
  operator std::span<const std::uint64_t>() const { return {begin(), end()}; }  // NOLINT

 private:
  std::array<std::uint64_t, 2> dims_{};
  std::uint8_t rank_ = 0;
};

/// One weight as the engine names it (112 bytes, no heap of its own: a plan holds one per
/// weight of the checkpoint).
struct LogicalWeight {
  /// The engine's name: a view of the checkpoint's name when the name map leaves it as it is,
  /// else of Recognized::names.
  std::string_view name;
  WeightShape shape;  ///< logical shape; 2-D weights are [O, I]
  TensorRef data;
  /// FP8 block scales (the whole, possibly 3-D, tensor), the FP8 per-tensor scale, the NVFP4
  /// per-16 block scales, the MXFP4 per-32 exponents, the int4 (CT) or MLX group scales.
  MaybeTensor scale;
  /// NVFP4's per-tensor second level; for MXFP4 and int4 (CT), the compressed-tensors
  /// "weight_shape" tensor when the checkpoint has one (read back and checked on open); MLX
  /// affine's per-group biases.
  MaybeTensor global_scale;
  std::uint64_t row0 = 0;
  /// For a slice of a fused 3-D tensor: which expert matrix (fewer than kMaxModelWeights) and
  /// which of its rows (row0).
  std::optional<std::uint32_t> expert;
  SourceEncoding encoding = SourceEncoding::kFloat;
  Dtype source_dtype = Dtype::kF32;
  bool global_divides = false;  ///< compressed-tensors: W = q * (s / global)
  /// Raw rows between two logical rows (float sources only): 2 reads every other row of a
  /// gate/up-interleaved fused tensor, starting at row0 (Inkling's w13 layout).
  std::uint8_t row_stride = 1;
  /// The scale grid: one scale per block_rows x block_cols elements (FP8 block: from
  /// config.json or the scale's shape; MXFP4: 1 x 32; int4 (CT), MLX affine: 1 x the group).
  std::uint16_t block_rows = 128, block_cols = 128;

  /// The raw tensor it comes from (the checkpoint's name).
  std::string_view source_name() const { return data.entry->name; }
  /// Every sidecar this weight consumes (kept weights copy them bitwise): its scale, then its
  /// global scale.
  Sidecars sidecars() const;
};

/// What recognition keeps of the weights: all of them, or only their count by encoding (what
/// inspect reports; its memory then does not grow with the weights).
enum class RecognizeWeights : std::uint8_t { kKeep, kCount };

/// How weights are named when no config.json gives the family: by the name map the tensor
/// names suggest (the engine converter's rule), or exactly as stored (a forward pass reading a
/// runtime's own names, such as Kimi K3's language_model.* with block_sparse_moe experts).
enum class RecognizeNames : std::uint8_t { kDetect, kAsStored };

struct Recognized {
  std::vector<LogicalWeight> weights;  ///< empty when recognised with RecognizeWeights::kCount
  /// The names of weights the name map renamed or unfusing made, and the plan's renamed kept
  /// sidecars (shared by copies: weights and plan entries view it).
  std::shared_ptr<Arena> names = std::make_shared<Arena>();
  std::size_t weight_count = 0;  ///< every weight made, kept or not
  /// Weights per source_encoding_name.
  std::map<std::string, std::size_t> encoding_counts;
  /// Sidecars consumed by a weight: (sidecar name, weight's source name), views of the
  /// checkpoint's names.
  std::vector<std::pair<std::string_view, std::string_view>> consumed;
  /// Raw tensors no recogniser claims, with the reason.
  std::vector<std::pair<std::string, std::string>> unclaimed;
  /// Raw tensors the family drops outright: (name, rule) — vision towers, static activation
  /// scales.
  std::vector<std::pair<std::string_view, std::string_view>> dropped;  ///< names: views
  /// The name map applied, and whether tensor names (not config.json) chose it.
  NameMap name_map = NameMap::kIdentity;
  bool name_map_from_names = false;
  std::uint64_t block_rows = 128, block_cols = 128;
};

/// "168 fp8-block, 38 bf16, 5 f32": the recognized weights counted by source encoding.
std::string source_encodings_summary(const Recognized& r);

/// Recognizes every tensor of `ck`. `config` (when present) supplies the family's name map, the
/// FP8 block size, the NVFP4 convention and the expected fused-expert dimensions. Errors (all
/// collected into one message): an FP8 or NVFP4 weight without its scales, a scale whose dtype
/// or shape does not fit its weight (swizzled or padded NVFP4 scales included), NVFP4 tensors
/// whose convention config.json does not state, a fused tensor whose shape disagrees with the
/// config.
Result<Recognized> recognize_weights(const Checkpoint& ck, const MoeConfig* config,
                                     RecognizeWeights keep = RecognizeWeights::kKeep,
                                     RecognizeNames names = RecognizeNames::kDetect);

}  // namespace qrepack
