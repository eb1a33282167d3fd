#include "qrepack/schemes/scheme.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace qrepack {
namespace {

constexpr std::array kSchemes = {
    SchemeInfo{"int4-row", "int4 offset-binary nibbles, one f32 scale per row (engine fmt 2)"},
    SchemeInfo{"int4-g<N>",
               "int4 nibbles, one f32 scale per N inputs, N in 16,32,48,64,96,128,192,256 "
               "(engine fmt 4; int4-g128 is the usual choice)"},
    SchemeInfo{"int8-row", "int8 two's complement, one f32 scale per row (engine fmt 1)"},
    SchemeInfo{"bf16", "bfloat16, round to nearest even"},
    SchemeInfo{"f32", "float32"},
    SchemeInfo{"fp8-block128", "F8_E4M3 with F32 128x128 _scale_inv multipliers (DeepSeek style)"},
    SchemeInfo{"e0m3-sfb",
               "Omega dit_svdquant_v1 pack (.pt) -> FlashRT E0M3 packed int4 + UE4M3 SFB (.pt)"},
};

constexpr std::array<std::uint64_t, 8> kGroups = {16, 32, 48, 64, 96, 128, 192, 256};

}  // namespace

std::span<const SchemeInfo> scheme_table() { return kSchemes; }
std::span<const std::uint64_t> engine_group_sizes() { return kGroups; }

std::string Scheme::name() const {
  switch (kind) {
    case SchemeKind::kInt4Row:
      return "int4-row";
    case SchemeKind::kInt4Group:
      return fmt::format("int4-g{}", group);
    case SchemeKind::kInt8Row:
      return "int8-row";
    case SchemeKind::kBf16:
      return "bf16";
    case SchemeKind::kF32:
      return "f32";
    case SchemeKind::kFp8Block128:
      return "fp8-block128";
    case SchemeKind::kE0m3Sfb:
      return "e0m3-sfb";
  }
  return "?";
}

Result<Scheme> parse_scheme(std::string_view t) {
  if (t == "int4-row") return Scheme{SchemeKind::kInt4Row};
  if (t == "int8-row") return Scheme{SchemeKind::kInt8Row};
  if (t == "bf16") return Scheme{SchemeKind::kBf16};
  if (t == "f32") return Scheme{SchemeKind::kF32};
  if (t == "fp8-block128") return Scheme{SchemeKind::kFp8Block128};
  if (t == "e0m3-sfb") return Scheme{SchemeKind::kE0m3Sfb};
  if (t.starts_with("int4-g")) {
    std::uint64_t g = 0;
    const char* b = t.data() + 6;
    const auto r = std::from_chars(b, t.data() + t.size(), g);
    if (r.ec == std::errc() && r.ptr == t.data() + t.size() &&
        std::find(kGroups.begin(), kGroups.end(), g) != kGroups.end()) {
      return Scheme{SchemeKind::kInt4Group, g};
    }
    return Error(ErrorKind::kUsage,
                 fmt::format("--to {}: group size must be one the engine detects: {}", t,
                             fmt::join(kGroups, ", ")));
  }
  std::string names;
  for (const auto& s : kSchemes) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return Error(ErrorKind::kUsage, fmt::format("unknown scheme \"{}\" (known: {})", t, names));
}

}  // namespace qrepack
