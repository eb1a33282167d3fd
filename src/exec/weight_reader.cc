#include "qrepack/exec/weight_reader.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/kernels.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp4.h"
#include "qrepack/formats/int4.h"
#include "qrepack/formats/mlx_affine.h"
#include "qrepack/formats/ue8m0.h"
#include "qrepack/schemes/fp8_block.h"

namespace qrepack {

Status WeightReader::read_block_scales(const Checkpoint& ck, const TensorRef& scale,
                                       std::uint64_t first, std::uint64_t count,
                                       std::vector<float>& out) {
  out.resize(count);
  if (scale.entry->dtype == Dtype::kF8E8M0) {
    std::vector<std::uint8_t> codes(count);
    QR_TRY(ck.read(scale, first, codes));
    for (std::uint64_t i = 0; i < count; ++i) {
      out[i] = codes[i] == 0xFF ? std::numeric_limits<float>::quiet_NaN() : ue8m0_decode(codes[i]);
    }
    return ok_status();
  }
  const Dtype d = scale.entry->dtype;
  if (d == Dtype::kBF16 || d == Dtype::kF16) {  // both widen to f32 exactly
    std::vector<std::uint16_t> codes(count);
    QR_TRY(ck.read(scale, first * 2,
                   std::span(reinterpret_cast<std::uint8_t*>(codes.data()), count * 2)));
    for (std::uint64_t i = 0; i < count; ++i) {
      out[i] = d == Dtype::kBF16 ? bf16_decode(codes[i]) : f16_decode(codes[i]);
    }
    return ok_status();
  }
  return ck.read(scale, first * 4,
                 std::span(reinterpret_cast<std::uint8_t*>(out.data()), out.size() * 4));
}

namespace {

// max_scale bounds the scale so that the largest code times it stays finite.
Result<float> read_scalar_scale(const Checkpoint& ck, const TensorRef& t, const char* rule,
                                float max_scale) {
  float v = 0;
  QR_TRY(ck.read(t, 0, std::span(reinterpret_cast<std::uint8_t*>(&v), 4)));
  if (!(v > 0.0f && v <= max_scale)) {
    return Error(
               ErrorKind::kInvalidScale,
               fmt::format("scale is {}; it must be finite, positive and at most {}", v, max_scale))
        .in_tensor(t.entry->name)
        .with_rule(rule);
  }
  return v;
}

}  // namespace

Status WeightReader::open(const LogicalWeight& w) {
  if (w_ == &w) return ok_status();
  w_ = nullptr;  // set again once the scales are in
  rows_ = rows_of(w);
  cols_ = cols_of(w);
  const auto& raw = w.data.entry->shape;
  // A fused tensor [E, R, C] is a stack of E matrices of R rows; expert e starts at row e*R.
  matrix_rows_ = w.expert ? raw[1] : rows_;
  raw_row0_ = (w.expert ? *w.expert * raw[1] : 0) + w.row0;
  block_rows_ = w.block_rows;
  block_cols_ = w.block_cols;
  scales_.clear();
  biases_.clear();
  nv_scales_.clear();
  scale_row0_ = 0;
  switch (w.encoding) {
    case SourceEncoding::kFp8Block: {
      const auto& ss = w.scale->entry->shape;
      const std::uint64_t sr = ss[ss.size() - 2], sc = ss.back();
      QR_TRY(
          read_block_scales(ck_, *w.scale, (w.expert ? *w.expert : 0) * sr * sc, sr * sc, scales_));
      // The plan checked them already unless it deferred the check to here (remote sources).
      if (auto st = fp8_block_check_scales(scales_, Fp8BlockShape{sr, sc, 1, 1}); !st.ok()) {
        return Error(ErrorKind::kInvalidScale, st.error().message())
            .in_file(ck_.shards()[w.scale->shard].path())
            .in_tensor(w.scale->entry->name)
            .with_rule(st.error().rule());
      }
      scale_row0_ = w.row0 / block_rows_;
      break;
    }
    case SourceEncoding::kFp8Tensor: {
      QR_ASSIGN_OR_RETURN(
          v, read_scalar_scale(ck_, *w.scale, "fp8_tensor.scale_positive", kMaxFp8Scale));
      scales_.assign(1, v);
      break;
    }
    case SourceEncoding::kNvfp4: {
      QR_ASSIGN_OR_RETURN(g, read_scalar_scale(ck_, *w.global_scale, "nvfp4.global_scale",
                                               std::numeric_limits<float>::max()));
      global_ = g;
      nv_scales_.resize(w.scale->entry->byte_size());
      QR_TRY(ck_.read(*w.scale, 0, nv_scales_));
      break;
    }
    case SourceEncoding::kMxfp4:
      nv_scales_.resize(w.scale->entry->byte_size());
      QR_TRY(ck_.read(*w.scale, 0, nv_scales_));
      QR_TRY(check_unpacked_shape(w));
      break;
    case SourceEncoding::kInt4Packed:
      QR_TRY(read_block_scales(ck_, *w.scale, 0, rows_ * w.scale->entry->shape[1], scales_));
      QR_TRY(check_unpacked_shape(w));
      break;
    case SourceEncoding::kMlxAffine: {
      // This weight's rows of the [.., O, groups] scales and biases (an expert of a stacked
      // tensor starts at its own rows).
      const std::uint64_t groups = w.scale->entry->shape.back();
      QR_TRY(read_block_scales(ck_, *w.scale, raw_row0_ * groups, rows_ * groups, scales_));
      QR_TRY(read_block_scales(ck_, *w.global_scale, raw_row0_ * groups, rows_ * groups, biases_));
      QR_TRY(check_affine_scalars(w, *w.scale, scales_));
      QR_TRY(check_affine_scalars(w, *w.global_scale, biases_));
      break;
    }
    case SourceEncoding::kFloat:
      break;
  }
  w_ = &w;
  return ok_status();
}

// MLX affine scales and biases are finite (a NaN or Inf would reach every weight of its group).
Status WeightReader::check_affine_scalars(const LogicalWeight& w, const TensorRef& t,
                                          std::span<const float> v) const {
  if (kernels::f32_all_finite(v.data(), v.size())) return ok_status();
  const std::uint64_t groups = t.entry->shape.back();
  std::uint64_t i = 0;
  while (i < v.size() && std::isfinite(v[i])) ++i;
  return Error(ErrorKind::kInvalidScale,
               fmt::format("group [{}, {}] of weight '{}' is {}; MLX affine scales and biases "
                           "must be finite",
                           w.row0 + i / groups, i % groups, w.name, v[i]))
      .in_file(ck_.shards()[t.shard].path())
      .in_tensor(t.entry->name)
      .with_rule("mlx_affine.scale_valid");
}

// compressed-tensors' weight_shape sidecar, when present, must be the logical shape.
Status WeightReader::check_unpacked_shape(const LogicalWeight& w) const {
  if (!w.global_scale) return ok_status();
  const TensorRef& t = *w.global_scale;
  const bool wide = t.entry->dtype == Dtype::kI64;
  std::array<std::uint8_t, 16> b{};
  QR_TRY(ck_.read(t, 0, std::span(b.data(), wide ? 16 : 8)));
  std::array<std::int64_t, 2> v{};
  for (std::size_t i = 0; i < 2; ++i) {
    if (wide) {
      std::memcpy(&v[i], b.data() + 8 * i, 8);
    } else {
      std::int32_t x;
      std::memcpy(&x, b.data() + 4 * i, 4);
      v[i] = x;
    }
  }
  if (v[0] == static_cast<std::int64_t>(rows_) && v[1] == static_cast<std::int64_t>(cols_)) {
    return ok_status();
  }
  return Error(ErrorKind::kUnexpectedShape,
               fmt::format("holds [{}, {}] but the packed weight unpacks to [{}, {}] (inputs "
                           "that are not a multiple of the packing are not read)",
                           v[0], v[1], rows_, cols_))
      .in_file(ck_.shards()[t.shard].path())
      .in_tensor(t.entry->name)
      .with_rule("compressed_tensors.weight_shape");
}

std::uint64_t WeightReader::stored_row_bytes(const LogicalWeight& w, std::uint64_t cols) {
  if (w.encoding == SourceEncoding::kNvfp4) return (cols + 1) / 2;
  if (w.encoding == SourceEncoding::kMxfp4 || w.encoding == SourceEncoding::kInt4Packed) {
    return cols / 2;  // cols is a multiple of 32 (MXFP4) or 8 (int4 words)
  }
  if (w.encoding == SourceEncoding::kMlxAffine) return cols * mlx_bits(w) / 8;
  return cols * (dtype_info(w.source_dtype).bits / 8);
}

Status WeightReader::read_raw_rows(std::uint64_t row0, std::uint64_t n,
                                   std::span<std::uint8_t> out) {
  const std::uint64_t rb = raw_row_bytes();
  QR_CHECK(out.size() == n * rb && row0 + n <= rows_, "read_raw_rows: range");
  const std::uint64_t stride = w_->row_stride;
  if (stride <= 1) return ck_.read(w_->data, (raw_row0_ + row0) * rb, out);
  QR_CHECK(w_->encoding == SourceEncoding::kFloat, "read_raw_rows: a strided scaled weight");
  // Every stride-th row (one of an interleaved pair): the rows between are read too, in spans
  // of up to kStridedSpanBytes, and the wanted ones copied out. One read per span, not per row:
  // a read per 4 KiB row cost more in system calls than the extra bytes do in copying.
  constexpr std::uint64_t kStridedSpanBytes = std::uint64_t{1} << 20;
  const std::uint64_t per_span = std::max<std::uint64_t>(1, kStridedSpanBytes / (stride * rb));
  for (std::uint64_t i = 0; i < n; i += per_span) {
    const std::uint64_t rows = std::min(per_span, n - i);
    const std::uint64_t span = ((rows - 1) * stride + 1) * rb;
    strided_.resize(span);
    QR_TRY(ck_.read(w_->data, (raw_row0_ + (row0 + i) * stride) * rb, strided_));
    for (std::uint64_t k = 0; k < rows; ++k) {
      std::memcpy(out.data() + (i + k) * rb, strided_.data() + k * stride * rb, rb);
    }
  }
  return ok_status();
}

std::uint64_t WeightReader::raw_row_bytes() const { return stored_row_bytes(*w_, cols_); }

Status WeightReader::read_rows(std::uint64_t row0, std::uint64_t n, std::span<float> out) {
  buffer_.resize(n * raw_row_bytes());
  QR_TRY(read_raw_rows(row0, n, buffer_));
  return decode_rows(buffer_, row0, n, out);
}

WeightReader::RowCodes WeightReader::row_codes(std::uint64_t row) const {
  using Kind = RowCodes::Kind;
  if (w_->encoding == SourceEncoding::kFp8Tensor) {
    return {Kind::kFp8, scales_.data(), cols_, rows_ - row};
  }
  if (w_->encoding == SourceEncoding::kFp8Block) {
    // Row r of this weight is row w.row0 + r of its matrix; its scales are the block row's.
    const std::uint64_t sc = (cols_ + block_cols_ - 1) / block_cols_, mrow = w_->row0 + row;
    return {Kind::kFp8, scales_.data() + (mrow / block_rows_) * sc, block_cols_,
            std::min(rows_ - row, block_rows_ - mrow % block_rows_)};
  }
  if (w_->encoding == SourceEncoding::kFloat && w_->source_dtype == Dtype::kBF16) {
    return {Kind::kBf16, nullptr, 0};
  }
  return {};
}

Status WeightReader::decode_nvfp4(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                  std::uint64_t n, std::span<float> out) const {
  const std::uint64_t rb = raw_row_bytes(), sb = (cols_ + 15) / 16;
  const Nvfp4Global mode = w_->global_divides ? Nvfp4Global::kDivide : Nvfp4Global::kMultiply;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint8_t* scales = nv_scales_.data() + (row0 + i) * sb;
    const std::int64_t bad =
        nvfp4_decode_row(raw.data() + i * rb, scales, cols_, global_, mode, out.data() + i * cols_);
    if (bad >= 0) {
      return Error(ErrorKind::kInvalidScale,
                   fmt::format("block scale [{}, {}] is 0x{:02X}: NVFP4 block scales are "
                               "non-negative finite E4M3 values",
                               row0 + i, bad, scales[bad]))
          .in_tensor(w_->scale->entry->name)
          .with_rule("nvfp4.scale_valid");
    }
  }
  return check_finite(out);
}

Status WeightReader::decode_mxfp4(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                  std::uint64_t n, std::span<float> out) const {
  const std::uint64_t rb = raw_row_bytes(), sb = cols_ / 32;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint8_t* exps = nv_scales_.data() + (row0 + i) * sb;
    const std::int64_t bad =
        mxfp4_decode_row(raw.data() + i * rb, exps, cols_, out.data() + i * cols_);
    if (bad >= 0) {
      return Error(ErrorKind::kInvalidScale,
                   fmt::format("exponent [{}, {}] is the UE8M0 NaN code 0xFF", row0 + i, bad))
          .in_tensor(w_->scale->entry->name)
          .with_rule("mxfp4.scale_valid");
    }
  }
  return check_finite(out);
}

Status WeightReader::decode_int4_ct(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                    std::uint64_t n, std::span<float> out) const {
  const std::uint64_t rb = raw_row_bytes(), g = block_cols_, sc = (cols_ + g - 1) / g;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float* s = scales_.data() + (row0 + i) * sc;
    for (std::uint64_t b = 0; b < sc; ++b) {
      if (!(s[b] >= 0.0f) || std::isinf(s[b])) {  // NaN fails the comparison
        return Error(ErrorKind::kInvalidScale,
                     fmt::format("group scale [{}, {}] is {}; scales must be finite and not "
                                 "negative",
                                 row0 + i, b, s[b]))
            .in_tensor(w_->scale->entry->name)
            .with_rule("int4_ct.scale_valid");
      }
    }
    const std::uint8_t* q = raw.data() + i * rb;
    float* o = out.data() + i * cols_;
    for (std::uint64_t k = 0; k < cols_; ++k) {
      o[k] = static_cast<float>(int4_decode(nibble_at(q, k))) * s[k / g];
    }
  }
  return ok_status();  // |q| <= 8 times a finite scale of F32 range: finite
}

unsigned WeightReader::mlx_bits(const LogicalWeight& w) {
  // The claim made the logical columns 32 / bits times the stored words.
  return static_cast<unsigned>(32 * w.data.entry->shape.back() / cols_of(w));
}

Status WeightReader::decode_mlx_affine(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                       std::uint64_t n, std::span<float> out) const {
  const std::uint64_t rb = raw_row_bytes(), g = block_cols_, groups = cols_ / g;
  const unsigned bits = mlx_bits(*w_);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t at = (row0 + i) * groups;
    mlx_affine_decode_row(raw.data() + i * rb, scales_.data() + at, biases_.data() + at, cols_,
                          bits, g, out.data() + i * cols_);
  }
  return check_finite(out);  // a large scale or bias can still overflow
}

Status WeightReader::check_finite(std::span<const float> out) const {
  if (kernels::f32_all_finite(out.data(), out.size())) return ok_status();
  return Error(ErrorKind::kNonFiniteWeight, "a decoded value is not finite")
      .in_tensor(w_->name)
      .with_rule("weights.finite");
}

Status WeightReader::decode_rows(std::span<const std::uint8_t> raw, std::uint64_t row0,
                                 std::uint64_t n, std::span<float> out) const {
  QR_CHECK(out.size() == n * cols_ && raw.size() == n * raw_row_bytes(), "decode_rows: sizes");
  const std::size_t count = out.size();
  bool finite = true;
  if (w_->encoding == SourceEncoding::kNvfp4) return decode_nvfp4(raw, row0, n, out);
  if (w_->encoding == SourceEncoding::kMxfp4) return decode_mxfp4(raw, row0, n, out);
  if (w_->encoding == SourceEncoding::kInt4Packed) return decode_int4_ct(raw, row0, n, out);
  if (w_->encoding == SourceEncoding::kMlxAffine) return decode_mlx_affine(raw, row0, n, out);
  switch (w_->source_dtype) {
    case Dtype::kF8E4M3: {
      for (std::uint64_t i = 0; i < n; ++i) {
        const RowCodes c = row_codes(row0 + i);
        QR_CHECK(c.kind == RowCodes::Kind::kFp8, "decode_rows: an F8_E4M3 weight without scales");
        finite &= kernels::fp8_decode_scaled(raw.data() + i * cols_, cols_, c.block_scales,
                                             c.block_cols, out.data() + i * cols_);
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
          .in_tensor(w_->source_name());
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
