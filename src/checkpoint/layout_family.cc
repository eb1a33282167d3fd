#include "qrepack/checkpoint/layout_family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

namespace qrepack {
namespace {

constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

// Block sizes b with ceil(n / b) == s: (s-1)*b < n <= s*b, i.e. ceil(n/s) <= b <=
// floor((n-1)/(s-1)).
std::optional<std::pair<std::uint64_t, std::uint64_t>> one_dim(std::uint64_t n, std::uint64_t s) {
  if (n == 0 || s == 0) return std::nullopt;
  const std::uint64_t lo = (n + s - 1) / s;
  const std::uint64_t hi = s == 1 ? kUnbounded : (n - 1) / (s - 1);
  if (lo > hi) return std::nullopt;
  return std::pair{lo, hi};
}

// Preferred block size inside [lo, hi]: 128 when it fits, else the smallest power of two, else lo.
std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
  if (lo <= 128 && 128 <= hi) return 128;
  for (std::uint64_t p = 1; p != 0 && p <= hi; p <<= 1) {
    if (p >= lo) return p;
  }
  return lo;
}

LayoutReport recognize_views(std::span<const TensorView> tensors);

}  // namespace

LayoutReport recognize_layout(std::span<const TensorSpec> tensors) {
  return recognize_views(views_of(tensors));
}

LayoutReport recognize_layout(const Checkpoint& ck) {
  std::vector<TensorView> views;
  views.reserve(ck.tensors().size());
  for (const TensorRef t : ck.tensors()) {
    views.push_back({t.entry->name, t.entry->dtype, t.entry->shape});
  }
  return recognize_views(views);
}

std::optional<BlockRange> block_range(std::span<const std::uint64_t> w,
                                      std::span<const std::uint64_t> s) {
  if (w.size() < 2 || s.size() != w.size()) return std::nullopt;
  for (std::size_t i = 0; i + 2 < w.size(); ++i) {
    if (w[i] != s[i]) return std::nullopt;  // leading (expert) dims must match
  }
  const auto r = one_dim(w[w.size() - 2], s[s.size() - 2]);
  const auto c = one_dim(w[w.size() - 1], s[s.size() - 1]);
  if (!r || !c) return std::nullopt;
  return BlockRange{r->first, r->second, c->first, c->second};
}

namespace {

LayoutReport recognize_views(std::span<const TensorView> tensors) {
  LayoutReport rep;
  if (tensors.empty()) {
    rep.id = "empty";
    rep.description = "empty (no tensors)";
    return rep;
  }
  std::unordered_map<std::string_view, const TensorView*> by_name;
  by_name.reserve(tensors.size());
  for (const TensorView& t : tensors) by_name.emplace(t.name, &t);

  std::map<std::string, std::size_t> dtype_counts;
  BlockRange range{1, kUnbounded, 1, kUnbounded};
  std::size_t fp8_without_scale = 0, bad_scale = 0, packed = 0;
  for (const TensorView& t : tensors) {
    ++dtype_counts[std::string(dtype_info(t.dtype).safetensors)];
    if (t.dtype == Dtype::kF8E4M3) {
      ++rep.fp8_tensors;
      const auto it = by_name.find(std::string(t.name) + kScaleInvSuffix);
      if (it == by_name.end()) {
        if (++fp8_without_scale <= 3) {
          rep.notes.push_back(
              fmt::format("F8_E4M3 tensor '{}' has no '{}{}'", t.name, t.name, kScaleInvSuffix));
        }
        continue;
      }
      const TensorView& sc = *it->second;
      const auto br = sc.dtype == Dtype::kF32 ? block_range(t.shape, sc.shape) : std::nullopt;
      if (!br) {
        if (++bad_scale <= 3) {
          rep.notes.push_back(fmt::format("scale '{}' ({} {}) does not fit weight '{}'", sc.name,
                                          dtype_info(sc.dtype).safetensors, sc.shape.size(),
                                          t.name));
        }
        continue;
      }
      range.rows_lo = std::max(range.rows_lo, br->rows_lo);
      range.rows_hi = std::min(range.rows_hi, br->rows_hi);
      range.cols_lo = std::max(range.cols_lo, br->cols_lo);
      range.cols_hi = std::min(range.cols_hi, br->cols_hi);
    } else if (t.dtype == Dtype::kU8 || t.dtype == Dtype::kI8 || t.dtype == Dtype::kI32 ||
               t.dtype == Dtype::kF4 || t.dtype == Dtype::kF8E5M2 || t.dtype == Dtype::kF8E8M0) {
      ++packed;
    }
  }
  // Sidecars: F32 tensors named "<fp8 weight>_scale_inv".
  for (const TensorView& t : tensors) {
    if (t.name.ends_with(kScaleInvSuffix)) {
      const auto w = by_name.find(t.name.substr(0, t.name.size() - std::strlen(kScaleInvSuffix)));
      if (w != by_name.end() && w->second->dtype == Dtype::kF8E4M3) ++rep.scale_sidecars;
    }
  }
  rep.other_tensors = tensors.size() - rep.fp8_tensors - rep.scale_sidecars;

  if (rep.fp8_tensors > 0) {
    if (fp8_without_scale > 3) {
      rep.notes.push_back(
          fmt::format("... {} F8_E4M3 tensors without a scale in all", fp8_without_scale));
    }
    const bool consistent = range.rows_lo <= range.rows_hi && range.cols_lo <= range.cols_hi;
    if (fp8_without_scale == 0 && bad_scale == 0 && consistent && packed == 0) {
      rep.family = LayoutFamily::kFp8Block;
      rep.id = "fp8_block";
      rep.block =
          BlockShape{pick(range.rows_lo, range.rows_hi), pick(range.cols_lo, range.cols_hi)};
      rep.description =
          fmt::format("FP8 E4M3, {}x{} block scales", rep.block->rows, rep.block->cols);
      return rep;
    }
    if (!consistent) rep.notes.push_back("scale shapes imply different block sizes");
  } else if (packed == 0) {
    rep.family = LayoutFamily::kPlainFloat;
    rep.id = "plain_float";
    std::string kinds;
    for (const auto& [d, n] : dtype_counts)
      kinds += fmt::format("{}{}", kinds.empty() ? "" : "+", d);
    rep.description = fmt::format("plain floating point ({})", kinds);
    return rep;
  }
  if (packed > 0) {
    rep.notes.push_back(
        fmt::format("{} packed or low-precision tensors (U8/I8/I32/F4/E5M2/E8M0) of "
                    "no recognised scheme",
                    packed));
  }
  rep.family = LayoutFamily::kUnknown;
  rep.id = "unknown";
  rep.description = "unknown";
  return rep;
}

}  // namespace
}  // namespace qrepack
