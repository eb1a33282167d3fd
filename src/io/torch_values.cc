#include "qrepack/io/torch_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/kernels.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/formats/float16.h"
#include "qrepack/parallel/parallel_for.h"

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

// Calls sink(i, value) for every element of floating tensor `t`, value in its widest exact
// type (float for 16/32-bit dtypes, double for F64). Stops early when sink returns false.
template <typename Sink>
Status visit_floats(const TorchFile& f, const PtTensor& t, Sink sink) {
  if (!is_float_dtype(t.dtype)) return not_float(f, t);
  QR_ASSIGN_OR_RETURN(raw, read_bytes(f, t));
  const std::uint64_t n = t.numel();
  const std::uint8_t* p = raw.data();
  bool go = true;
  for (std::uint64_t i = 0; i < n && go; ++i) {
    switch (t.dtype) {
      case Dtype::kF16:
        go = sink(i, f16_decode(load<std::uint16_t>(p + 2 * i)));
        break;
      case Dtype::kBF16:
        go = sink(i, bf16_decode(load<std::uint16_t>(p + 2 * i)));
        break;
      case Dtype::kF32:
        go = sink(i, load<float>(p + 4 * i));
        break;
      default:
        go = sink(i, load<double>(p + 8 * i));
    }
  }
  return ok_status();
}

template <typename Out, typename Conv>
Result<std::vector<Out>> convert_all(const TorchFile& f, const PtTensor& t, Conv conv) {
  std::vector<Out> out(t.numel());
  QR_TRY(visit_floats(f, t, [&](std::uint64_t i, auto v) {
    out[i] = conv(v);
    return true;
  }));
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

Result<bool> all_float_values(const TorchFile& f, const PtTensor& t,
                              const std::function<bool(double)>& pred) {
  bool all = true;
  QR_TRY(visit_floats(f, t, [&](std::uint64_t, auto v) {
    all = pred(static_cast<double>(v));
    return all;
  }));
  return all;
}

namespace {

// Whether `count` raw elements of dtype d are all finite (f16/bf16 by their exponent bits).
bool chunk_finite(Dtype d, const std::uint8_t* raw, std::uint64_t count) {
  const auto* h = reinterpret_cast<const std::uint16_t*>(raw);
  switch (d) {
    case Dtype::kF16:
      return kernels::f16_all_finite(h, count);
    case Dtype::kBF16:
      return kernels::bf16_all_finite(h, count);
    default:
      return kernels::f32_all_finite(reinterpret_cast<const float*>(raw), count);
  }
}

}  // namespace

Result<bool> all_finite_values(const TorchFile& f, const PtTensor& t) {
  if (!is_float_dtype(t.dtype)) return not_float(f, t);
  if (!t.contiguous() || t.dtype == Dtype::kF64) {
    return all_float_values(f, t, [](double v) { return std::isfinite(v); });
  }
  // Chunks of 1M elements, split over the pool in contiguous ranges; each thread reads its
  // chunks into its own buffer and stops at its first non-finite chunk or read error. The
  // ranges are then taken in order, so the answer is the serial walk's.
  constexpr std::uint64_t kChunk = 1 << 20;
  const std::uint64_t item = dtype_info(t.dtype).bits / 8, n = t.numel();
  const std::uint64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<Status> status(thread_count(), ok_status());
  std::vector<char> finite(thread_count(), 1);
  parallel_for(chunks, 1, [&](std::size_t c0, std::size_t c1, std::size_t worker) {
    RawVector<std::uint8_t> raw(std::min(n, kChunk) * item);
    for (std::size_t c = c0; c < c1; ++c) {
      const std::uint64_t first = c * kChunk, count = std::min(kChunk, n - first);
      status[worker] = f.read_elements(t, first, count, std::span(raw.data(), count * item));
      if (!status[worker].ok()) return;
      if (!chunk_finite(t.dtype, raw.data(), count)) {
        finite[worker] = 0;
        return;
      }
    }
  });
  for (std::size_t w = 0; w < status.size(); ++w) {
    QR_TRY(std::move(status[w]));
    if (!finite[w]) return false;
  }
  return true;
}

Result<std::vector<float>> read_f32(const TorchFile& f, const PtTensor& t) {
  return convert_all<float>(f, t, [](auto v) { return static_cast<float>(v); });
}

Result<std::vector<std::uint16_t>> read_fp16(const TorchFile& f, const PtTensor& t) {
  if (t.dtype == Dtype::kF16) {
    std::vector<std::uint16_t> h(t.numel());
    QR_TRY(f.read(t, std::span(reinterpret_cast<std::uint8_t*>(h.data()), h.size() * 2)));
    return h;
  }
  // torch rounds f64 -> f32 -> f16 for .to(float16), as this does.
  return convert_all<std::uint16_t>(f, t, [](auto v) { return f16_encode(static_cast<float>(v)); });
}

namespace {

// The elements of a tensor stored as exactly `want`, copied as T.
template <typename T>
Result<std::vector<T>> read_exact(const TorchFile& f, const PtTensor& t, Dtype want) {
  if (t.dtype != want) {
    return Error(ErrorKind::kInvalidRecord,
                 fmt::format("tensor of dtype {} where {} is required", dtype_info(t.dtype).name,
                             dtype_info(want).name))
        .in_file(f.path());
  }
  std::vector<T> v(t.numel());
  QR_TRY(f.read(t, std::span(reinterpret_cast<std::uint8_t*>(v.data()), v.size() * sizeof(T))));
  return v;
}

}  // namespace

Result<std::vector<std::int64_t>> read_i64(const TorchFile& f, const PtTensor& t) {
  return read_exact<std::int64_t>(f, t, Dtype::kI64);
}

Result<std::vector<std::uint8_t>> read_u8(const TorchFile& f, const PtTensor& t) {
  return read_exact<std::uint8_t>(f, t, Dtype::kU8);
}

}  // namespace qrepack
