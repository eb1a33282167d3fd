#include "qrepack/exec/weight_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/kernels.h"
#include "qrepack/formats/float16.h"
#include "qrepack/schemes/fp8_block.h"

namespace qrepack {

Status WeightReader::open(const LogicalWeight& w) {
  if (w_ == &w) return ok_status();
  w_ = nullptr;  // set again once the scales are in
  rows_ = rows_of(w);
  cols_ = cols_of(w);
  const auto& raw = w.data.entry->shape;
  // A fused tensor [E, R, C] is a stack of E matrices of R rows; expert e starts at row e*R.
  matrix_rows_ = w.expert ? raw[1] : rows_;
  raw_row0_ = w.expert ? *w.expert * raw[1] + w.row0 : 0;
  scales_.clear();
  scale_row0_ = 0;
  if (w.encoding == SourceEncoding::kFp8Block) {
    const TensorRef& s = *w.scale;
    const auto& ss = s.entry->shape;
    const std::uint64_t sr = ss[ss.size() - 2], sc = ss.back();
    scales_.resize(sr * sc);
    const std::uint64_t offset = (w.expert ? *w.expert : 0) * sr * sc * 4;
    QR_TRY(ck_.read(
        s, offset, std::span(reinterpret_cast<std::uint8_t*>(scales_.data()), scales_.size() * 4)));
    scale_row0_ = w.row0 / block_rows_;
  }
  w_ = &w;
  return ok_status();
}

Status WeightReader::read_raw_rows(std::uint64_t row0, std::uint64_t n,
                                   std::span<std::uint8_t> out) {
  const std::uint64_t esize = dtype_info(w_->source_dtype).bits / 8;
  QR_CHECK(out.size() == n * cols_ * esize && row0 + n <= rows_, "read_raw_rows: range");
  return ck_.read(w_->data, (raw_row0_ + row0) * cols_ * esize, out);
}

std::uint64_t WeightReader::raw_row_bytes() const {
  return cols_ * (dtype_info(w_->source_dtype).bits / 8);
}

Status WeightReader::read_rows(std::uint64_t row0, std::uint64_t n, std::span<float> out) {
  buffer_.resize(n * raw_row_bytes());
  QR_TRY(read_raw_rows(row0, n, buffer_));
  return decode_rows(buffer_, row0, n, out);
}

Status WeightReader::decode_rows(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                 std::uint64_t n, std::span<float> out) const {
  QR_CHECK(out.size() == n * cols_ && raw.size() == n * raw_row_bytes(), "decode_rows: sizes");
  const std::size_t count = out.size();
  bool finite = true;
  switch (w_->source_dtype) {
    case Dtype::kF8E4M3: {
      // Row r of this weight is row w.row0 + r of its matrix; its scales are the block row's.
      const std::uint64_t sc = (cols_ + block_cols_ - 1) / block_cols_;
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t mrow = w_->row0 + row0 + i;
        finite &= kernels::fp8_decode_scaled(raw.data() + i * cols_, cols_,
                                             scales_.data() + (mrow / block_rows_) * sc,
                                             block_cols_, out.data() + i * cols_);
      }
      break;
    }
    case Dtype::kBF16:
      finite = kernels::bf16_to_f32(reinterpret_cast<const std::uint16_t*>(raw.data()), count,
                                    out.data());
      break;
    case Dtype::kF16:
      finite = kernels::f16_to_f32(reinterpret_cast<const std::uint16_t*>(raw.data()), count,
                                   out.data());
      break;
    case Dtype::kF32:
      std::memcpy(out.data(), raw.data(), count * 4);
      finite = kernels::f32_all_finite(out.data(), count);
      break;
    case Dtype::kF64:
      for (std::size_t i = 0; i < count; ++i) {
        double d;
        std::memcpy(&d, raw.data() + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      finite = kernels::f32_all_finite(out.data(), count);
      break;
    default:
      return Error(ErrorKind::kUnclaimedTensor, "not a floating-point weight")
          .in_tensor(w_->source_name);
  }
  if (finite) return ok_status();
  for (std::size_t i = 0; i < count; ++i) {  // find the first offender for the message
    if (w_->source_dtype == Dtype::kF8E4M3 && (raw[i] & 0x7F) == 0x7F) {
      out[i] = std::numeric_limits<float>::quiet_NaN();
    }
    if (!std::isfinite(out[i])) {
      return Error(ErrorKind::kNonFiniteWeight,
                   fmt::format("row {} column {} is {}; weights must be finite", row0 + i / cols_,
                               i % cols_, out[i]))
          .in_tensor(w_->name)
          .with_rule("weights.finite");
    }
  }
  return Error(ErrorKind::kNonFiniteWeight, "a value is not finite")
      .in_tensor(w_->name)
      .with_rule("weights.finite");
}

}  // namespace qrepack
