#include "qrepack/schemes/scheme.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace qrepack {
namespace {

constexpr std::array kSchemes = {
    SchemeInfo{SchemeKind::kInt4Row, "int4-row",
               "int4 offset-binary nibbles, one f32 scale per row (engine fmt 2)",
               "`<name>` U8 [O·ceil(I/2)] offset-binary nibbles (q+8, even element low, odd rows "
               "pad 0) + `<name>.qs` F32 [O]"},
    SchemeInfo{SchemeKind::kInt4Group, "int4-g<N>",
               "int4 nibbles, one f32 scale per N inputs (engine fmt 4; int4-g128 is the usual "
               "choice)",
               "same nibbles + `.qs` F32 [O·ceil(I/N)] row-major; N ∈ 16, 32, 48, 64, 96, 128, "
               "192, 256 (what the engine detects)"},
    SchemeInfo{SchemeKind::kInt8Row, "int8-row",
               "int8 two's complement, one f32 scale per row (engine fmt 1)",
               "`<name>` U8 [O·I] two's complement + `.qs` F32 [O]"},
    SchemeInfo{SchemeKind::kInt2Row, "int2-row",
               "int2, four codes per byte, one f32 scale per row (engine fmt 3); io stays int8",
               "`<name>` U8 [O·ceil(I/4)] codes q+2 (element e at bits (e&3)·2 of byte e>>2) + "
               "`.qs` F32 [O]"},
    SchemeInfo{SchemeKind::kInt3G64, "int3-g64",
               "int3 in two bit planes, one f32 scale per 64 inputs (engine fmt 5); io stays "
               "int8",
               "`<name>` U8 [O·ceil(I/64)·24] (per group a 16-byte low plane, an 8-byte high "
               "plane; codes q+4) + `.qs` F32 [O·ceil(I/64)]"},
    SchemeInfo{SchemeKind::kFp8Passthrough, "fp8-passthrough",
               "FP8 E4M3 bytes as stored plus f32 128x128 block scales as .qs (engine fmt 8, "
               "stamped in __metadata__[\"colibri.fmt\"]); io stays as stored",
               "`<name>` U8 [O, I] E4M3 codes (the source's bytes) + `.qs` F32 "
               "[ceil(O/128)·ceil(I/128)]; residents stamped `fp8-e4m3-b128`"},
    SchemeInfo{SchemeKind::kBf16, "bf16", "bfloat16, round to nearest even",
               "`<name>` BF16, original shape"},
    SchemeInfo{SchemeKind::kF32, "f32", "float32", "`<name>` F32, original shape"},
    SchemeInfo{SchemeKind::kFp8Block128, "fp8-block128",
               "F8_E4M3 with F32 128x128 _scale_inv multipliers (DeepSeek style)",
               "`<name>` F8_E4M3 + `<name>_scale_inv` F32 128×128 multipliers"},
    SchemeInfo{SchemeKind::kE0m3Sfb, "e0m3-sfb",
               "Omega dit_svdquant_v1 pack (.pt) -> FlashRT E0M3 packed int4 + UE4M3 SFB (.pt)",
               "an Omega pack (.pt) or a MIP-QAT checkpoint (.safetensors) in, a FlashRT E0M3 "
               "artifact out (see below)"},
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
    case SchemeKind::kInt2Row:
      return "int2-row";
    case SchemeKind::kInt3G64:
      return "int3-g64";
    case SchemeKind::kFp8Passthrough:
      return "fp8-passthrough";
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

std::string scheme_help() {
  std::string out;
  for (const auto& s : kSchemes) {
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", s.name, s.summary);
    if (s.kind == SchemeKind::kInt4Group) out += fmt::format(", N in {}", fmt::join(kGroups, ","));
  }
  return out;
}

std::vector<std::string> scheme_names() {
  std::vector<std::string> out;
  for (const auto& s : kSchemes) {
    if (s.kind != SchemeKind::kInt4Group) {
      out.emplace_back(s.name);
      continue;
    }
    for (std::uint64_t g : kGroups) out.push_back(fmt::format("int4-g{}", g));
  }
  return out;
}

Result<Scheme> parse_scheme(std::string_view t) {
  for (const auto& s : kSchemes) {
    if (s.kind != SchemeKind::kInt4Group && s.name == t) return Scheme{s.kind};
  }
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
