// Element values of .pt tensors as numbers: the one place that turns a PtTensor's stored
// floating-point or integer elements into double / float / fp16 codes, used by the pack
// validator, the E0M3 converter and the checker.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/torch_pt.h"

namespace qrepack {

/// True for F16, BF16, F32, F64.
bool is_float_dtype(Dtype d);

/// Every element as double, exactly (F64 stays F64, so a finite 1e300 stays finite).
Result<std::vector<double>> read_f64(const TorchFile& f, const PtTensor& t);
/// Whether `pred` holds for every element of a floating tensor, each passed exactly as double
/// (without materialising a double copy of the tensor).
Result<bool> all_float_values(const TorchFile& f, const PtTensor& t,
                              const std::function<bool(double)>& pred);
/// Whether every element of a floating tensor is finite, read in chunks through one buffer
/// and checked with the SIMD kernels.
Result<bool> all_finite_values(const TorchFile& f, const PtTensor& t);
/// Every element as f32 (F64 rounded to nearest).
Result<std::vector<float>> read_f32(const TorchFile& f, const PtTensor& t);
/// Every element as fp16 codes, converted with RNE as torch's .to(float16) does (F16 as is).
Result<std::vector<std::uint16_t>> read_fp16(const TorchFile& f, const PtTensor& t);
/// An I64 tensor's elements.
Result<std::vector<std::int64_t>> read_i64(const TorchFile& f, const PtTensor& t);
/// Any tensor's elements as contiguous little-endian bytes.
Result<std::vector<std::uint8_t>> read_bytes(const TorchFile& f, const PtTensor& t);
/// A U8 tensor's bytes.
Result<std::vector<std::uint8_t>> read_u8(const TorchFile& f, const PtTensor& t);

}  // namespace qrepack
