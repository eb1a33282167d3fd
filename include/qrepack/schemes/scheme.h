// The `--to` schemes: one table drives parsing, --help and the docs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack {

enum class SchemeKind : std::uint8_t {
  kInt4Row,
  kInt4Group,
  kInt8Row,
  kBf16,
  kF32,
  kFp8Block128,
  kE0m3Sfb,  ///< Omega pack -> FlashRT E0M3 artifact
};

struct Scheme {
  SchemeKind kind;
  std::uint64_t group = 0;  ///< int4-g<N>
  std::string name() const;
  /// Schemes whose precision per class can be set with --bits.
  bool has_bits() const {
    return kind == SchemeKind::kInt4Row || kind == SchemeKind::kInt4Group ||
           kind == SchemeKind::kInt8Row;
  }
};

struct SchemeInfo {
  std::string_view name;
  std::string_view summary;
};

std::span<const SchemeInfo> scheme_table();

/// Group sizes the C engine can detect from byte counts (reference/colibri.md §3.5).
std::span<const std::uint64_t> engine_group_sizes();

/// Parses "int4-row", "int4-g128", "int8-row", "bf16", "f32", "fp8-block128", "e0m3-sfb".
Result<Scheme> parse_scheme(std::string_view text);

}  // namespace qrepack
