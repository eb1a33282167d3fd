// The activation rounding DeepSeek V4 Flash's runtime (c/deepseek_v4.c) applies between its
// steps: bf16 round-to-nearest-even, e4m3 / e2m1 quantize-dequantize with one UE8M0 scale per
// block (coli_fp8_activation_qdq_ref / coli_fp4_activation_qdq_ref), the bf16 Hadamard
// rotation (coli_hadamard_bf16_ref). Each in place, in a fixed order.
#pragma once

#include <cstdint>
#include <span>

namespace qrepack::model {

float bf16_round(float v);
void bf16_round(std::span<float> x);
/// Per block of `block` values: scale 2^ceil(log2(max(|x|, 1e-4) / 448)), each value
/// e4m3-rounded (nearest even, saturating) at that scale.
void fp8_qdq(std::span<float> x, std::uint64_t block);
/// Per block: scale 2^ceil(log2(max(|x|, 6 * 2^-126) / 6)), each value the nearest e2m1 code
/// (ties to the first in code order: the smaller magnitude).
void fp4_qdq(std::span<float> x, std::uint64_t block);
/// The Walsh-Hadamard butterfly over x (a power of two long), times 1/sqrt(n), bf16-rounded.
void hadamard_bf16(std::span<float> x);

}  // namespace qrepack::model
