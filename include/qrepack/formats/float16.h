// 16-bit floats. bfloat16: f32's top 16 bits. IEEE binary16 (f16): 1 sign, 5 exponent (bias 15),
// 10 mantissa, subnormals, Inf and NaN. Encoding rounds to nearest, ties to even, from the exact
// f32; f16 overflow gives +-Inf; NaN stays a quiet NaN with its sign. Spec: docs/formats/floats.md.
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

std::uint16_t bf16_encode(float x);
float bf16_decode(std::uint16_t code);
std::uint16_t f16_encode(float x);
float f16_decode(std::uint16_t code);

/// Array versions; `out.size()` must equal `in.size()`. Identical results to the scalar codecs.
void bf16_encode_span(std::span<const float> in, std::span<std::uint16_t> out);
void bf16_decode_span(std::span<const std::uint16_t> in, std::span<float> out);
void f16_encode_span(std::span<const float> in, std::span<std::uint16_t> out);
void f16_decode_span(std::span<const std::uint16_t> in, std::span<float> out);

}  // namespace qrepack
