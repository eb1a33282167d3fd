#include "qrepack/exec/weight_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "qrepack/formats/float16.h"
#include "qrepack/schemes/fp8_block.h"

namespace qrepack {

Status WeightReader::open(const LogicalWeight& w) {
  w_ = &w;
  rows_ = w.shape.size() == 2 ? w.shape[0] : 1;
  cols_ = w.shape.empty() ? 1 : w.shape.back();
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
  return ok_status();
}

Status WeightReader::read_raw_rows(std::uint64_t row0, std::uint64_t n,
                                   std::span<std::uint8_t> out) {
  const std::uint64_t esize = dtype_info(w_->source_dtype).bits / 8;
  QR_CHECK(out.size() == n * cols_ * esize && row0 + n <= rows_, "read_raw_rows: range");
  return ck_.read(w_->data, (raw_row0_ + row0) * cols_ * esize, out);
}

Status WeightReader::read_rows(std::uint64_t row0, std::uint64_t n, std::span<float> out) {
  QR_CHECK(out.size() == n * cols_, "read_rows: output size");
  const std::uint64_t esize = dtype_info(w_->source_dtype).bits / 8;
  buffer_.resize(n * cols_ * esize);
  QR_TRY(read_raw_rows(row0, n, buffer_));
  const std::size_t count = out.size();
  switch (w_->source_dtype) {
    case Dtype::kF8E4M3: {
      const Fp8BlockShape shape{matrix_rows_, cols_, block_rows_, block_cols_};
      fp8_block_decode_rows(buffer_, scales_, shape, w_->row0 + row0, out);
      break;
    }
    case Dtype::kBF16:
      bf16_decode_span(std::span(reinterpret_cast<const std::uint16_t*>(buffer_.data()), count),
                       out);
      break;
    case Dtype::kF16:
      f16_decode_span(std::span(reinterpret_cast<const std::uint16_t*>(buffer_.data()), count),
                      out);
      break;
    case Dtype::kF32:
      std::memcpy(out.data(), buffer_.data(), count * 4);
      break;
    case Dtype::kF64:
      for (std::size_t i = 0; i < count; ++i) {
        double d;
        std::memcpy(&d, buffer_.data() + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    default:
      return Error(ErrorKind::kUnclaimedTensor, "not a floating-point weight")
          .in_tensor(w_->source_name);
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(out[i])) {
      return Error(ErrorKind::kNonFiniteWeight,
                   fmt::format("row {} column {} is {}; weights must be finite", row0 + i / cols_,
                               i % cols_, out[i]))
          .in_tensor(w_->name)
          .with_rule("weights.finite");
    }
  }
  return ok_status();
}

}  // namespace qrepack
