// The `--to` schemes: one table drives parsing, --help and the docs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

enum class SchemeKind : std::uint8_t {
  kInt4Row,
  kInt4Group,
  kInt8Row,
  kInt2Row,         ///< engine fmt 3
  kInt3G64,         ///< engine fmt 5
  kFp8Passthrough,  ///< engine fmt 8: FP8 E4M3 bytes + f32 block scales as .qs
  kBf16,
  kF32,
  kFp8Block128,
  kE0m3Sfb,  ///< Omega pack -> FlashRT E0M3 artifact
};

struct Scheme {
  SchemeKind kind;
  std::uint64_t group = 0;  ///< int4-g<N>
  std::string name() const;
  /// Schemes whose precision per class can be set with --bits (the engine converter's
  /// integer containers).
  bool has_bits() const {
    return kind == SchemeKind::kInt4Row || kind == SchemeKind::kInt4Group ||
           kind == SchemeKind::kInt8Row || kind == SchemeKind::kInt2Row ||
           kind == SchemeKind::kInt3G64;
  }
};

/// One row of the scheme table: it drives parse_scheme, `convert --to`'s help and the README's
/// scheme table (a test keeps the README's rows equal to `output`).
struct SchemeInfo {
  SchemeKind kind;
  std::string_view name;     ///< as written after --to ("int4-g<N>" for the group family)
  std::string_view summary;  ///< one line for --help
  std::string_view output;   ///< the README's description of the tensors it writes
};

std::span<const SchemeInfo> scheme_table();

/// The `--to` help text, from the table.
std::string scheme_help();
/// Every name parse_scheme takes, int4-g<N> spelled out for each engine group size.
std::vector<std::string> scheme_names();

/// Group sizes the C engine can detect from byte counts (reference/colibri.md §3.5).
std::span<const std::uint64_t> engine_group_sizes();

/// Parses "int4-row", "int4-g128", "int8-row", "int2-row", "int3-g64", "fp8-passthrough", "bf16",
/// "f32", "fp8-block128", "e0m3-sfb".
Result<Scheme> parse_scheme(std::string_view text);

}  // namespace qrepack
