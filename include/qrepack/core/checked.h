// Overflow-checked arithmetic for every size that comes from a file: shape products, byte
// sizes, offsets. Each returns nullopt on overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qrepack {

inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// Product of all dimensions (1 for a scalar shape []).
inline std::optional<std::uint64_t> checked_numel(std::span<const std::uint64_t> shape) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) {
    auto next = checked_mul(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

/// The number that `text` spells in 1 to `max_digits` decimal digits and nothing else, or
/// nullopt (so a file-supplied "99999999999999999999" is refused, never thrown or wrapped).
inline std::optional<std::uint64_t> parse_decimal(std::string_view text,
                                                  std::size_t max_digits = 18) {
  if (text.empty() || text.size() > max_digits || max_digits > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

/// ceil(a / b) for b > 0, without the overflow of (a + b - 1) / b.
constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace qrepack
