// Recognize: raw tensors -> logical weights. An F8_E4M3 weight and its "<name>_scale_inv"
// sidecar are one FP8-block weight; a fused 3-D expert tensor (HF `mlp.experts.gate_up_proj`
// [E, 2M, I] / `mlp.experts.down_proj` [E, D, M]) is 2E or E logical 2-D weights named as the
// engine names them; a float tensor is itself. Every raw tensor ends up in exactly one logical
// weight, as a consumed sidecar, or in the unclaimed list (never silently skipped).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

enum class SourceEncoding : std::uint8_t {
  kFloat,     ///< F16 / BF16 / F32 / F64 elements
  kFp8Block,  ///< F8_E4M3 elements times a block scale
};

struct LogicalWeight {
  std::string name;                  ///< the engine's name
  std::vector<std::uint64_t> shape;  ///< logical shape; 2-D weights are [O, I]
  SourceEncoding encoding;
  Dtype source_dtype;
  TensorRef data;
  std::optional<TensorRef> scale;  ///< FP8 block scales (the whole, possibly 3-D, tensor)
  /// For a slice of a fused 3-D tensor: which expert matrix and which of its rows.
  std::optional<std::uint64_t> expert;
  std::uint64_t row0 = 0;
  std::string source_name;  ///< the raw tensor it comes from
};

struct Recognized {
  std::vector<LogicalWeight> weights;
  /// Sidecars consumed by a weight: (sidecar name, weight name).
  std::vector<std::pair<std::string, std::string>> consumed;
  /// Raw tensors no recogniser claims, with the reason.
  std::vector<std::pair<std::string, std::string>> unclaimed;
  std::uint64_t block_rows = 128, block_cols = 128;
};

/// Recognizes every tensor of `ck`. `config` (when present) supplies the FP8 block size and
/// the expected fused-expert dimensions. Errors (all collected into one message): an FP8
/// weight without its scale, a scale whose shape does not fit its weight and block size, a
/// fused tensor whose shape disagrees with the config.
Result<Recognized> recognize_weights(const Checkpoint& ck, const MoeConfig* config);

}  // namespace qrepack
