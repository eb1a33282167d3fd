// verify: decodes every output weight through the engine's byte-count format detection and
// table decoders (not the encoder's inverse) and compares it with the source dequantized to
// f32, row block by row block.
#pragma once

#include <cstdint>
#include <map>
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

struct ScanReport {
  std::map<std::string, std::size_t> encodings;  ///< weights per source encoding
  std::uint64_t weights = 0, values = 0;         ///< decoded
};

/// Decodes every weight of `source` (a directory, file or URL) through the source decoders,
/// checking every scale and value as a conversion would. The first bad one is the error (file,
/// tensor, rule).
Result<ScanReport> scan_source(const std::string& source);

}  // namespace qrepack
