// Recognises what kind of checkpoint a set of tensors is, from names, dtypes and shapes only
// (no tensor data is read):
//   plain floating point   every real-valued tensor is F16/BF16/F32/F64
//   FP8 block-scaled       F8_E4M3 weights each with an F32 "<name>_scale_inv" sidecar whose
//                          shape is [ceil(O/bo), ceil(I/bo)] (DeepSeek-V3 / GLM style); the
//                          block size is derived from the shapes
//   unknown                anything else (packed U8/I8, FP8 without sidecars, ...), with notes
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qrepack/io/checkpoint.h"
#include "qrepack/io/safetensors_writer.h"

namespace qrepack {

enum class LayoutFamily : std::uint8_t { kEmpty, kPlainFloat, kFp8Block, kUnknown };

struct BlockShape {
  std::uint64_t rows;
  std::uint64_t cols;
};

struct LayoutReport {
  LayoutFamily family = LayoutFamily::kEmpty;
  std::string id;           ///< stable machine name: empty, plain_float, fp8_block, unknown
  std::string description;  ///< in words, e.g. "FP8 E4M3, 128x128 block scales"
  std::optional<BlockShape> block;
  std::size_t fp8_tensors = 0;
  std::size_t scale_sidecars = 0;
  std::size_t other_tensors = 0;
  std::vector<std::string> notes;  ///< why a checkpoint is unknown, or what looks odd
};

/// Suffix of the FP8 block-scale sidecar: "<weight>_scale_inv".
inline constexpr const char* kScaleInvSuffix = "_scale_inv";

/// Block sizes (rows, cols) consistent with a weight of `weight_shape` (last two dims O, I)
/// having a scale of `scale_shape` (last two dims), as closed ranges [lo, hi]; nullopt when no
/// block size fits.
struct BlockRange {
  std::uint64_t rows_lo, rows_hi, cols_lo, cols_hi;
};
std::optional<BlockRange> block_range(std::span<const std::uint64_t> weight_shape,
                                      std::span<const std::uint64_t> scale_shape);

LayoutReport recognize_layout(std::span<const TensorSpec> tensors);
/// The same over an open checkpoint's tensors (their names are viewed, never copied).
LayoutReport recognize_layout(const Checkpoint& ck);

}  // namespace qrepack
