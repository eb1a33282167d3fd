// verify: decodes every output weight through the engine's byte-count format detection and
// table decoders (not the encoder's inverse) and compares it with the source dequantized to
// f32, row block by row block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

struct ErrorStats {
  std::uint64_t n = 0;
  double ref2 = 0, err2 = 0, out2 = 0, dot = 0, max_abs = 0;
  void add(const ErrorStats& o);
  double rel_l2() const;
  double cosine() const;
  double snr_db() const;
};

struct TensorVerify {
  std::string name;
  std::string cls;     ///< precision class (experts, attn, ...)
  std::string format;  ///< int4-g128, int8-row, bf16, fp8-block, ...
  ErrorStats stats;
};

struct VerifyReport {
  std::vector<TensorVerify> tensors;
  std::size_t not_in_output = 0;  ///< source weights the conversion dropped
};

Result<VerifyReport> verify_conversion(const std::string& source, const std::string& output);

}  // namespace qrepack
