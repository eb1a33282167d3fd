// SIMD kernels (Google Highway, dynamic dispatch: one entry point per kernel family, the best
// target the CPU supports chosen at first call). Each is bit-identical to the scalar reference
// named beside it, which stays the specification; src/kernels/kernels_test.cc checks every
// compiled target the machine supports against it. Kernels never start threads: callers split
// work by rows with parallel_for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qrepack::kernels {

/// out[j] = e4m3(codes[j]) * block_scales[j / block_cols], f32 multiply (ref:
/// fp8_block_decode_rows). Returns false when a code is NaN (0x7F, 0xFF); out is then
/// unspecified.
bool fp8_decode_scaled(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                       std::size_t block_cols, float* out);
/// bf16 / f16 codes to f32, exact (ref: bf16_decode, f16_decode). False when any is Inf/NaN.
bool bf16_to_f32(const std::uint16_t* in, std::size_t n, float* out);
bool f16_to_f32(const std::uint16_t* in, std::size_t n, float* out);
/// Whether every value is finite.
bool f32_all_finite(const float* in, std::size_t n);
/// Whether every f16 / bf16 code is finite (its exponent not all ones), without decoding.
bool f16_all_finite(const std::uint16_t* in, std::size_t n);
bool bf16_all_finite(const std::uint16_t* in, std::size_t n);
/// f32 to bf16, RNE, NaN quieted with its sign (ref: bf16_encode).
void f32_to_bf16(const float* in, std::size_t n, std::uint16_t* out);
/// IEEE binary16 of each value, round to nearest even (ref: f16_encode), bit for bit.
void f32_to_f16(const float* in, std::size_t n, std::uint16_t* out);

/// E4M3FN codes of x[i] / divisor (f32 division; divisor 1 gives e4m3(x) exactly), RNE, as
/// e4m3_encode: saturating (overflow and Inf -> +-448, NaN -> 0x7F) or not (overflow, Inf
/// and NaN -> NaN with the sign).
void e4m3_encode_div(const float* x, std::size_t n, float divisor, bool saturate,
                     std::uint8_t* out);
/// max |x[i]| (x finite).
float abs_max(const float* x, std::size_t n);
/// codes[i] = clamp(round-half-even(x[i] / scale), lo, hi), or with x[i] * (1 / scale) (one f32
/// division) when `reciprocal`: the container quantizers' codes (ref: quantize_rows). x finite,
/// scale positive, lo and hi integers in [-128, 127].
void int_codes(const float* x, std::size_t n, float scale, bool reciprocal, float lo, float hi,
               std::int8_t* codes);

/// The engine's int4 row (ref: int4_encode_row): group 0 or >= n means per row; packed has
/// ceil(n/2) bytes, scales ceil(n/group). Values must be finite.
void int4_encode_row(const float* w, std::size_t n, std::size_t group, std::uint8_t* packed,
                     float* scales);
/// The engine's int8 row (ref: int8_encode_row); returns the scale.
float int8_encode_row(const float* w, std::size_t n, std::uint8_t* out);

/// Fused decode + encode, the same bytes as decoding the row (fp8_decode_scaled, bf16_to_f32)
/// and encoding it (int4_encode_row, int8_encode_row), without the f32 row in memory. False,
/// with out and scales unspecified, when a code is NaN (FP8) or Inf/NaN (bf16). FP8 block
/// scales must be finite, and e4m3(448) times each must be finite.
bool fp8_to_int4_row(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                     std::size_t block_cols, std::size_t group, std::uint8_t* packed,
                     float* scales);
bool fp8_to_int8_row(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                     std::size_t block_cols, std::uint8_t* out, float* scale);
/// fp8_to_int4_row on each of `rows` rows of n codes (row-major) that share one row of block
/// scales: packed holds rows * ceil(n/2) bytes, scales rows * ceil(n/group) values. False as
/// it when any row would be. Where each group lies inside one block (group divides block_cols)
/// the codes are compared with per-(block, group maximum) cuts instead of divided.
bool fp8_to_int4_rows(const std::uint8_t* codes, std::size_t rows, std::size_t n,
                      const float* block_scales, std::size_t block_cols, std::size_t group,
                      std::uint8_t* packed, float* scales);
bool bf16_to_int4_row(const std::uint16_t* in, std::size_t n, std::size_t group,
                      std::uint8_t* packed, float* scales);
bool bf16_to_int8_row(const std::uint16_t* in, std::size_t n, std::uint8_t* out, float* scale);

/// One row of FlashRT's E0M3 quantizer (ref: e0m3_quantize): k % 16 == 0, packed k/2 bytes,
/// scale_bytes k/16 UE4M3 bytes in row order (the caller places them in the SF layout).
void e0m3_quantize_row(const std::uint16_t* fp16, std::size_t k, std::uint8_t* packed,
                       std::uint8_t* scale_bytes);

/// The E8/IQ3 rotation of one row in place (ref: e8_rotate_row), the same f32 results.
void e8_rotate_row(float* row, std::size_t n);
/// One E8/IQ3 row (ref: e8_encode_row_ref): n % 256 == 0 rotated weights to n / 256 * 98
/// bytes; false (out unspecified) when a super-block's scale overflows fp16.
bool e8_encode_row(const float* rotated, std::size_t n, std::uint8_t* out);

/// Name of the target the dispatcher uses now (e.g. "AVX3", "AVX2", "SSE4", "SCALAR").
std::string active_target();

/// Targets compiled into this binary, best first.
std::vector<std::string> compiled_targets();
/// Those of them this CPU runs, best first (what the dispatcher may choose from).
std::vector<std::string> available_targets();
/// Pins dispatch to target `name` (one of available_targets()); false when it is not one. The
/// bytes every kernel writes are the same on every target.
bool force_target(std::string_view name);

}  // namespace qrepack::kernels
