// FlashRT's E0M3 quantizer (quantize_e0m3_dynamic_sfa_fp16; reference/flashrt_omega.md §2.2),
// bit-exact on the CPU. Per row, per 16 consecutive K elements of fp16 input:
//   amax = max |v| (NaN ignored); d = amax / 7 (f32 division), floored at 1e-12;
//   scale byte = UE4M3 (RNE, satfinite) of d; inv = 1 / decode(scale) (inf when 0);
//   code = E0M3 of v * inv (f32 multiply): min(rint_even(|t|), 7), sign only if t < 0 and the
//   magnitude > 0, NaN -> 0, +-inf -> +-7.
// Codes are packed two per byte (element 2p low) into [rows, K/2]; scale bytes go to the
// CUTLASS Sm1xx layout (layouts/sf_sm1xx.h), whose padding stays zero.
#pragma once

#include <cstdint>
#include <span>

#include "qrepack/core/error.h"

namespace qrepack {

/// K a multiple of 16, or an error naming the rule (e0m3.k_multiple_of_16).
Status e0m3_check_k(std::uint64_t k);

/// Quantizes a row-major fp16 matrix [rows, k] (k % 16 == 0). `packed` has rows*k/2 bytes;
/// `sf` has sf_sm1xx_size(rows, k) bytes and is zero-filled here first. Rows are split over
/// the thread pool and encoded with the SIMD kernel; the bytes equal the reference's.
Status e0m3_quantize(std::span<const std::uint16_t> fp16, std::uint64_t rows, std::uint64_t k,
                     std::span<std::uint8_t> packed, std::span<std::uint8_t> sf);

/// Rows r0.. of e0m3_quantize's [rows, k] matrix on the calling thread (k % 16 == 0): `fp16`
/// holds whole rows starting at row r0, `packed` their k/2 bytes each; their scale bytes go to
/// `sf`, the whole matrix's (sf_sm1xx_size(rows, k) bytes, already zero-filled). Only those
/// rows' bytes are written, so disjoint row ranges may run at once.
void e0m3_quantize_rows(std::span<const std::uint16_t> fp16, std::span<std::uint8_t> packed,
                        std::uint64_t r0, std::uint64_t k, std::span<std::uint8_t> sf,
                        std::uint64_t rows);

/// The scalar specification of the same function, one element at a time.
Status e0m3_quantize_reference(std::span<const std::uint16_t> fp16, std::uint64_t rows,
                               std::uint64_t k, std::span<std::uint8_t> packed,
                               std::span<std::uint8_t> sf);

/// Reconstructs f32 values from packed codes and Sm1xx-laid scales (decode tables only).
void e0m3_dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> sf,
                     std::uint64_t rows, std::uint64_t k, std::span<float> out);

}  // namespace qrepack
