// ggml tensor types as GGUF stores them (ggml.h enum ggml_type; block sizes and bytes from
// ggml-common.h's block structs) and the decoders qrepack implements: f32 values computed with
// the operations of ggml-quants.c's dequantize_row_* in the same order (compiled without
// floating-point contraction), so the results are bit-identical.
// Block layouts (QK_K = 256; d, dmin fp16):
//   Q4_0  32 per 18 B: d, qs[16]; x = ((q & 15) - 8) * d, low nibbles first half
//   Q4_1  32 per 20 B: d, m, qs[16]; x = q * d + m
//   Q5_0  32 per 22 B: d, qh[4], qs[16]; x = ((q | h << 4) - 16) * d
//   Q5_1  32 per 24 B: d, m, qh[4], qs[16]; x = (q | h << 4) * d + m
//   Q8_0  32 per 34 B: d, qs[32] int8; x = q * d
//   Q2_K 256 per 84 B: scales[16] (low 4 bits scale, high 4 min), qs[64], d, dmin
//   Q3_K 256 per 110 B: hmask[32], qs[64], scales[12] (sixteen 6-bit, offset 32), d
//   Q4_K 256 per 144 B: d, dmin, scales[12] (eight 6-bit scales and mins), qs[128]
//   Q5_K 256 per 176 B: d, dmin, scales[12], qh[32], qs[128]
//   Q6_K 256 per 210 B: ql[128], qh[64], scales[16] int8, d
//   IQ4_NL 32 per 18 B: d, qs[16]; x = d * level[q] (ggml's kvalues_iq4nl)
//   IQ4_XS 256 per 136 B: d, scales_h, scales_l[4], qs[128]; eight 6-bit scales (offset 32)
//   MXFP4 32 per 17 B: e (E8M0), qs[16]; x = 2 * e2m1[q] * 2^(e - 128)
//   TQ1_0 256 per 54 B: qs[48] (5 base-3 digits a byte), qh[4] (4 a byte), d; x = (t - 1) * d
//   TQ2_0 256 per 66 B: qs[64] (2-bit codes), d; x = (q - 1) * d
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qrepack {

/// One row of the ggml type table.
struct GgmlTypeInfo {
  std::uint32_t id;
  std::string_view name;
  std::uint32_t block;        ///< elements per block
  std::uint32_t block_bytes;  ///< bytes per block
  bool decodes;               ///< ggml_dequantize_row implements it
};

/// The table row of ggml type `id`, or null for an id ggml does not define (or removed).
const GgmlTypeInfo* ggml_type_info(std::uint32_t id);
/// Every row, in id order.
std::span<const GgmlTypeInfo> ggml_types();

inline constexpr std::uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3;
inline constexpr std::uint32_t kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlQ8_0 = 8;
inline constexpr std::uint32_t kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13;
inline constexpr std::uint32_t kGgmlQ6_K = 14, kGgmlIQ3_XXS = 18, kGgmlIQ4_NL = 20,
                               kGgmlIQ4_XS = 23;
inline constexpr std::uint32_t kGgmlBF16 = 30, kGgmlTQ1_0 = 34, kGgmlTQ2_0 = 35, kGgmlMXFP4 = 39;

/// Decodes `out.size()` elements (a whole number of blocks) of type `id` from `in`, which
/// holds exactly their bytes. False (nothing written) for a type without a decoder or sizes
/// that do not match.
bool ggml_dequantize_row(std::uint32_t id, std::span<const std::uint8_t> in, std::span<float> out);

}  // namespace qrepack
