// Reads rows of a logical weight as f32, whatever its source encoding (F16/BF16/F32/F64, FP8
// block-scaled or per-tensor, NVFP4, MXFP4, compressed-tensors int4, MLX affine) and whether it
// is a whole tensor or one expert's rows of a fused 3-D tensor. Reads go through pread into the
// reader's reused buffer; the FP8 scales of the weight's matrix are read once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

class WeightReader {
 public:
  WeightReader(const Checkpoint& ck, std::uint64_t block_rows, std::uint64_t block_cols)
      : ck_(ck), block_rows_(block_rows), block_cols_(block_cols) {}

  /// Selects the weight to read; loads its scales (once: opening the selected weight again
  /// does nothing).
  Status open(const LogicalWeight& w);
  /// Rows and columns of the matrix view of a weight (a 1-D weight is one row).
  static std::uint64_t rows_of(const LogicalWeight& w) {
    return w.shape.size() == 2 ? w.shape[0] : 1;
  }
  static std::uint64_t cols_of(const LogicalWeight& w) {
    return w.shape.empty() ? 1 : w.shape.back();
  }
  std::uint64_t rows() const { return rows_; }
  std::uint64_t cols() const { return cols_; }
  /// Decodes rows [row0, row0 + n) into `out` (n * cols floats). Non-finite values are an
  /// error naming the tensor and row.
  Status read_rows(std::uint64_t row0, std::uint64_t n, std::span<float> out);
  /// Decodes `n` rows starting at `row0` from their raw stored bytes (as read_raw_rows gives
  /// them) into `out`. Const and thread-safe: rows may be decoded on several threads at once.
  Status decode_rows(std::span<const std::uint8_t> raw, std::uint64_t row0, std::uint64_t n,
                     std::span<float> out) const;
  /// The raw stored bytes of rows [row0, row0 + n) (for bitwise copies).
  Status read_raw_rows(std::uint64_t row0, std::uint64_t n, std::span<std::uint8_t> out);
  /// How row `row` is stored, for kernels that decode as they encode: FP8 codes with their
  /// block scales (a per-tensor scale is one block as wide as the row), BF16, or neither.
  struct RowCodes {
    enum class Kind { kOther, kFp8, kBf16 } kind = Kind::kOther;
    const float* block_scales = nullptr;  ///< FP8: the row's scales, one per block_cols
    std::uint64_t block_cols = 0;
    std::uint64_t shared_rows = 1;  ///< FP8: this row and those after it with the same scales
  };
  RowCodes row_codes(std::uint64_t row) const;
  /// Raw scale bytes of the selected rows' blocks (for bitwise copies of FP8 slices).
  std::span<const float> scales() const { return scales_; }
  std::uint64_t scale_row0() const { return scale_row0_; }
  /// Bytes of one stored row.
  std::uint64_t raw_row_bytes() const;
  /// Bytes of one stored row of `w` with `cols` logical columns (NVFP4 packs two per byte).
  static std::uint64_t stored_row_bytes(const LogicalWeight& w, std::uint64_t cols);
  /// Reads `count` block scales of `scale` starting at element `first` as f32: F32 as stored,
  /// F8_E8M0 decoded (2^(code - 127); the NaN code 0xFF is decoded as NaN for the caller's
  /// finiteness check).
  static Status read_block_scales(const Checkpoint& ck, const TensorRef& scale, std::uint64_t first,
                                  std::uint64_t count, std::vector<float>& out);

 private:
  Status decode_nvfp4(std::span<const std::uint8_t> raw, std::uint64_t row0, std::uint64_t n,
                      std::span<float> out) const;
  Status decode_mxfp4(std::span<const std::uint8_t> raw, std::uint64_t row0, std::uint64_t n,
                      std::span<float> out) const;
  Status decode_int4_ct(std::span<const std::uint8_t> raw, std::uint64_t row0, std::uint64_t n,
                        std::span<float> out) const;
  Status decode_mlx_affine(std::span<const std::uint8_t> raw, std::uint64_t row0, std::uint64_t n,
                           std::span<float> out) const;
  Status check_affine_scalars(const LogicalWeight& w, const TensorRef& t,
                              std::span<const float> v) const;
  static unsigned mlx_bits(const LogicalWeight& w);
  Status check_finite(std::span<const float> out) const;
  Status check_unpacked_shape(const LogicalWeight& w) const;

  const Checkpoint& ck_;
  std::uint64_t block_rows_, block_cols_;
  const LogicalWeight* w_ = nullptr;
  std::uint64_t rows_ = 0, cols_ = 0;
  std::uint64_t raw_row0_ = 0;     ///< row of the raw 2-D view where this weight starts
  std::uint64_t matrix_rows_ = 0;  ///< rows of the (expert) matrix the scales cover
  std::uint64_t scale_row0_ = 0;   ///< first scale row of this weight within its matrix
  std::vector<float> scales_;  ///< the matrix's scales (FP8 block or per-tensor, int4/MLX groups)
  std::vector<float> biases_;  ///< MLX affine: this weight's per-group biases
  /// NVFP4: the matrix's F8_E4M3 per-16 scales; MXFP4: its UE8M0 per-32 exponents.
  std::vector<std::uint8_t> nv_scales_;
  float global_ = 1.0f;                ///< NVFP4: the per-tensor second level
  std::vector<std::uint8_t> buffer_;   ///< raw rows
  std::vector<std::uint8_t> strided_;  ///< a span of rows read for its every stride-th one
};

}  // namespace qrepack
