#include "qrepack/io/torch_values.h"

#include <fmt/format.h>

#include <cstring>

#include "qrepack/formats/float16.h"

namespace qrepack {
namespace {

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Error not_float(const TorchFile& f, const PtTensor& t) {
  return Error(ErrorKind::kInvalidRecord,
               fmt::format("tensor of dtype {} where a floating-point tensor is required",
                           dtype_info(t.dtype).name))
      .in_file(f.path());
}

// Reads `t` as floating point and maps every element through `conv(double-or-float)`.
template <typename Out, typename Conv>
Result<std::vector<Out>> convert_all(const TorchFile& f, const PtTensor& t, Conv conv) {
  if (!is_float_dtype(t.dtype)) return not_float(f, t);
  QR_ASSIGN_OR_RETURN(raw, read_bytes(f, t));
  const std::uint64_t n = t.numel();
  std::vector<Out> out(n);
  const std::uint8_t* p = raw.data();
  for (std::uint64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case Dtype::kF16:
        out[i] = conv(f16_decode(load<std::uint16_t>(p + 2 * i)));
        break;
      case Dtype::kBF16:
        out[i] = conv(bf16_decode(load<std::uint16_t>(p + 2 * i)));
        break;
      case Dtype::kF32:
        out[i] = conv(load<float>(p + 4 * i));
        break;
      default:
        out[i] = conv(load<double>(p + 8 * i));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::uint8_t>> read_bytes(const TorchFile& f, const PtTensor& t) {
  std::vector<std::uint8_t> b(t.numel() * (dtype_info(t.dtype).bits / 8));
  QR_TRY(f.read(t, b));
  return b;
}

bool is_float_dtype(Dtype d) {
  return d == Dtype::kF16 || d == Dtype::kBF16 || d == Dtype::kF32 || d == Dtype::kF64;
}

Result<std::vector<double>> read_f64(const TorchFile& f, const PtTensor& t) {
  return convert_all<double>(f, t, [](auto v) { return static_cast<double>(v); });
}

Result<std::vector<float>> read_f32(const TorchFile& f, const PtTensor& t) {
  return convert_all<float>(f, t, [](auto v) { return static_cast<float>(v); });
}

Result<std::vector<std::uint16_t>> read_fp16(const TorchFile& f, const PtTensor& t) {
  if (t.dtype == Dtype::kF16) {
    QR_ASSIGN_OR_RETURN(raw, read_bytes(f, t));
    std::vector<std::uint16_t> h(t.numel());
    std::memcpy(h.data(), raw.data(), raw.size());
    return h;
  }
  // torch rounds f64 -> f32 -> f16 for .to(float16), as this does.
  return convert_all<std::uint16_t>(f, t, [](auto v) { return f16_encode(static_cast<float>(v)); });
}

Result<std::vector<std::int64_t>> read_i64(const TorchFile& f, const PtTensor& t) {
  if (t.dtype != Dtype::kI64) {
    return Error(
               ErrorKind::kInvalidRecord,
               fmt::format("tensor of dtype {} where int64 is required", dtype_info(t.dtype).name))
        .in_file(f.path());
  }
  QR_ASSIGN_OR_RETURN(raw, read_bytes(f, t));
  std::vector<std::int64_t> v(t.numel());
  std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

Result<std::vector<std::uint8_t>> read_u8(const TorchFile& f, const PtTensor& t) {
  if (t.dtype != Dtype::kU8) {
    return Error(
               ErrorKind::kInvalidRecord,
               fmt::format("tensor of dtype {} where uint8 is required", dtype_info(t.dtype).name))
        .in_file(f.path());
  }
  return read_bytes(f, t);
}

}  // namespace qrepack
