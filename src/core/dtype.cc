#include "qrepack/core/dtype.h"

#include <array>
#include <cstddef>

#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

using D = Dtype;
using K = DtypeKind;

// safetensors strings per the reference crate's enum (reference/serialization.md A3); torch
// storage names per torch 1.13's torch._storage_classes (reference/serialization.md B5).
constexpr std::array kDtypes = {
    DtypeInfo{D::kBool, "bool", "BOOL", "BoolStorage", 8, K::kBool},
    DtypeInfo{D::kU8, "u8", "U8", "ByteStorage", 8, K::kUnsigned},
    DtypeInfo{D::kI8, "i8", "I8", "CharStorage", 8, K::kSigned},
    DtypeInfo{D::kI16, "i16", "I16", "ShortStorage", 16, K::kSigned},
    DtypeInfo{D::kU16, "u16", "U16", "", 16, K::kUnsigned},
    DtypeInfo{D::kI32, "i32", "I32", "IntStorage", 32, K::kSigned},
    DtypeInfo{D::kU32, "u32", "U32", "", 32, K::kUnsigned},
    DtypeInfo{D::kI64, "i64", "I64", "LongStorage", 64, K::kSigned},
    DtypeInfo{D::kU64, "u64", "U64", "", 64, K::kUnsigned},
    DtypeInfo{D::kF16, "f16", "F16", "HalfStorage", 16, K::kFloat},
    DtypeInfo{D::kBF16, "bf16", "BF16", "BFloat16Storage", 16, K::kFloat},
    DtypeInfo{D::kF32, "f32", "F32", "FloatStorage", 32, K::kFloat},
    DtypeInfo{D::kF64, "f64", "F64", "DoubleStorage", 64, K::kFloat},
    DtypeInfo{D::kF8E4M3, "f8_e4m3", "F8_E4M3", "", 8, K::kFloat8},
    DtypeInfo{D::kF8E5M2, "f8_e5m2", "F8_E5M2", "", 8, K::kFloat8},
    DtypeInfo{D::kF8E8M0, "f8_e8m0", "F8_E8M0", "", 8, K::kScale8},
    DtypeInfo{D::kF4, "f4", "F4", "", 4, K::kFloat4},
};
static_assert(kDtypes.size() == static_cast<std::size_t>(D::kF4) + 1,
              "kDtypes needs one row per Dtype");

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kDtypes.size(); ++i) {
    if (static_cast<std::size_t>(kDtypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kDtypes rows must follow Dtype order");

}  // namespace

std::span<const DtypeInfo> all_dtypes() { return kDtypes; }

const DtypeInfo& dtype_info(Dtype dtype) { return kDtypes[static_cast<std::size_t>(dtype)]; }

std::optional<Dtype> dtype_from_safetensors(std::string_view s) {
  for (const auto& row : kDtypes) {
    if (row.safetensors == s) return row.dtype;
  }
  return std::nullopt;
}

std::optional<Dtype> dtype_from_torch_storage(std::string_view s) {
  if (s.empty()) return std::nullopt;
  for (const auto& row : kDtypes) {
    if (row.torch_storage == s) return row.dtype;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> dtype_byte_size(Dtype dtype, std::uint64_t numel) {
  auto bits = checked_mul(numel, dtype_info(dtype).bits);
  if (!bits || *bits % 8 != 0) return std::nullopt;
  return *bits / 8;
}

bool dtype_is_floating(Dtype dtype) {
  switch (dtype_info(dtype).kind) {
    case K::kFloat:
    case K::kFloat8:
    case K::kFloat4:
      return true;
    default:
      return false;
  }
}

}  // namespace qrepack
