// MIP-QAT pi0.5 checkpoint (a safetensors file from openpi's train_mip_qat.py) -> FlashRT
// `omega_e0m3_v1` artifact, as the FlashRT fork's tools/convert_qat_ckpt_e0m3.py writes it
// (docs/formats/omega-e0m3.md §8): the action expert's 126 projections
// `paligemma_with_expert.gemma_expert.model.layers.{i}.{self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj}.weight` (i = 0..17), each cast to fp16 (RNE) and quantized by
// e0m3_quantize; aux is the identity the consumer rotates with (64x64 fp16 eye blocks, perm
// arange(K) int64, act_scale_table ones(1, K) f32, bits 4, rank 0, fold "none"). Everything is
// validated before any byte is written: the 126 names (or --select / --expected-records), float
// dtypes, 2-D shapes with N and K multiples of 64 and one hidden width, fp16-finite weights.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/name_pattern.h"
#include "qrepack/core/progress.h"
#include "qrepack/io/safetensors.h"
#include "qrepack/omega/e0m3_convert.h"

namespace qrepack {

/// pi0.5's action expert: 18 layers x 7 projections.
inline constexpr std::uint64_t kPi05ExpertLayers = 18;
inline constexpr std::uint64_t kPi05ExpertRecordCount = 126;
/// Block size of the identity rotations the consumer applies (N and K must be multiples).
inline constexpr std::uint64_t kQatRotationBlock = 64;
/// Largest weight accepted, in elements (pi0.5's largest is 4096 x 1024).
inline constexpr std::uint64_t kMaxQatWeightElements = 1ull << 28;
/// source_pack_meta.format of a QAT artifact.
inline constexpr const char* kQatSourceFormat = "mip_qat_ckpt_v1";

/// The layer name ("...q_proj", without ".weight") when `tensor` is one of the expert's
/// projection weights: the converter's include pattern, searched anywhere in the name.
std::optional<std::string> qat_expert_layer(std::string_view tensor);

struct QatValidateOptions {
  std::optional<NamePattern> select;
  std::optional<std::uint64_t> expected_records;
};

struct QatLayer {
  std::string name;  ///< the artifact's layer name (tensor name without ".weight")
  const TensorEntry* tensor = nullptr;
  std::uint64_t n = 0, k = 0;
};

struct QatValidation {
  std::vector<QatLayer> layers;  ///< selected, sorted byte-wise as the converter sorts
  std::uint64_t matched = 0;     ///< expert weights in the checkpoint before --select
  std::uint64_t expected = 0;
};

/// Every rule above, all problems reported together (rule omega.qat); reads each selected
/// weight once to check it is finite in fp16.
Result<QatValidation> validate_qat_checkpoint(const SafetensorsFile& ck,
                                              const QatValidateOptions& o);

/// Buffers a caller reuses across weights: they only grow, so converting 126 weights
/// allocates (and zeroes) each buffer's pages once.
struct QatReadBuffers {
  std::vector<std::uint8_t> raw;
  std::vector<std::uint16_t> fp16;
  std::vector<float> f32;  ///< one chunk of a BF16 / F32 weight on its way to fp16
};

/// A weight as fp16 [n, k]: F16 as stored, BF16 and F32 rounded to nearest even. The span views
/// `buffers.fp16` (valid until the next read into them).
Result<std::span<const std::uint16_t>> read_qat_weight_fp16(const SafetensorsFile& ck,
                                                            const TensorEntry& t,
                                                            QatReadBuffers& buffers);

struct QatConvertOptions {
  bool keep_fp16 = false;  ///< also store the fp16 weight as weight_fp16_folded
  std::string ckpt_label;  ///< source_pack_meta.ckpt: the checkpoint path as given
  ProgressMode progress = ProgressMode::kAuto;
};

/// Writes the .pt artifact atomically; the checkpoint must have passed validate_qat_checkpoint.
Result<E0m3ConvertReport> convert_qat_e0m3(const SafetensorsFile& ck, const QatValidation& v,
                                           const QatConvertOptions& o, const std::string& out);

}  // namespace qrepack
