// One routed expert's three projections as f32 matrices, wherever they are stored: per-expert
// tensors (Qwen3-MoE, OLMoE releases; any source encoding), one expert's rows of fused 3-D
// gate_up_proj / down_proj tensors (Qwen3.5 / 3.6 releases), or a runtime's merged blob:
//   <p>.merged_weight + <p>.qs   gate | up | down flattened into one tensor, quantized per row
//                                or per group (scales gate | up | down, each row-major):
//     I8, 3*I*H bytes            int8 codes (colibri-olmoe; colibri-qwen36 at 5..8 bits)
//     U8, 3*I*H/2 bytes          4-bit two's-complement nibbles, element 2k in the low nibble
//                                (colibri-qwen36 at 2..4 bits)
//     U8, 2*I*H bytes            gate and up as nibbles, then down as int8 codes
//                                (colibri-qwen36 --bits down=5..8)
//     U8, 3*I*H/2 bytes, offset   4-bit offset-binary nibbles (code + 8), element 2k low
//                                (colibri-qwen38-int4's overlay; NibbleCode::kOffsetBinary)
// The group sizes come from qwen36_meta.json's expert_gs / expert_down_gs when the directory
// has one, else from the scale count (per row, or the one group size it implies).
#pragma once

#include <cstdint>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/model/model_weights.h"

namespace qrepack::model {

/// How a merged blob's 4-bit codes are signed: two's complement (colibri-qwen36) or offset
/// binary, code + 8 (colibri-qwen38-int4, convert_qwen38_int4.py).
enum class NibbleCode : std::uint8_t { kTwosComplement, kOffsetBinary };

struct ExpertMatrices {
  Matrix gate, up, down;  ///< [I, H], [I, H], [H, I]
};

class ExpertSource {
 public:
  ExpertSource() = default;
  /// `prefix`: the text model's tensor prefix ("model." or "model.language_model.").
  static Result<ExpertSource> make(const ModelWeights& w, std::string prefix, std::uint64_t hidden,
                                   std::uint64_t inter,
                                   NibbleCode nibbles = NibbleCode::kTwosComplement);
  Result<ExpertMatrices> read(std::uint64_t layer, std::uint64_t expert) const;

 private:
  ExpertSource(const ModelWeights& w, std::string prefix, std::uint64_t hidden, std::uint64_t inter)
      : w_(&w), prefix_(std::move(prefix)), hidden_(hidden), inter_(inter) {}
  Result<ExpertMatrices> read_merged(const std::string& p) const;
  Result<Matrix> read_named(std::uint64_t layer, std::uint64_t expert, const char* proj,
                            std::uint64_t rows, std::uint64_t cols) const;

  const ModelWeights* w_ = nullptr;
  std::string prefix_;
  std::uint64_t hidden_ = 0, inter_ = 0;
  std::uint64_t meta_gs_ = 0, meta_down_gs_ = 0;  ///< from qwen36_meta.json
  bool has_meta_ = false;
  NibbleCode nibbles_ = NibbleCode::kTwosComplement;
};

}  // namespace qrepack::model
