// Dense float math for `qrepack check`: Y = A B^T for row-major A [m, k] and B [n, k], and the
// cosine statistics the checker reports.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qrepack/omega/e0m3_check.h"

namespace qrepack {

/// Y [m, n] = A [m, k] x B [n, k]^T, f32 products accumulated in f32 (eight partial sums).
std::vector<float> matmul_nt(std::span<const float> a, std::span<const float> b, std::uint64_t m,
                             std::uint64_t n, std::uint64_t k);

/// Global and per-row cosine of `y` against `ref`, both [m, n], in double.
CosineStats cosine_stats(std::span<const float> y, std::span<const float> ref, std::uint64_t m,
                         std::uint64_t n);

}  // namespace qrepack
