// The dtype table: one constexpr row per element type qrepack can read or write. The rows drive
// parsing of safetensors and torch headers, printing, and byte-size validation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qrepack {

enum class Dtype : std::uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kF4,
};

enum class DtypeKind : std::uint8_t {
  kBool,
  kUnsigned,
  kSigned,
  kFloat,   ///< IEEE-style or bfloat16: F16, BF16, F32, F64.
  kFloat8,  ///< FP8 element formats E4M3FN and E5M2.
  kScale8,  ///< UE8M0 power-of-two scales.
  kFloat4,  ///< packed 4-bit E2M1 (shape counts logical elements).
};

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;           ///< short name shown to users
  std::string_view safetensors;    ///< header "dtype" string
  std::string_view torch_storage;  ///< legacy torch typed storage class, empty if none
  std::uint8_t bits;               ///< bits per logical element
  DtypeKind kind;
};

/// Every row of the table, in enum order.
std::span<const DtypeInfo> all_dtypes();

/// The row of `dtype`.
const DtypeInfo& dtype_info(Dtype dtype);

/// Parses a safetensors dtype string ("BF16", "F8_E4M3", ...). Case-sensitive, like the format.
std::optional<Dtype> dtype_from_safetensors(std::string_view s);

/// Parses a torch legacy storage class name ("HalfStorage", ...).
std::optional<Dtype> dtype_from_torch_storage(std::string_view s);

/// Bytes needed by `numel` elements: nullopt on overflow or when numel*bits is not a whole
/// number of bytes (e.g. an odd count of F4 elements).
std::optional<std::uint64_t> dtype_byte_size(Dtype dtype, std::uint64_t numel);

/// True for the dtypes whose values are real numbers (floats, fp8, fp4).
bool dtype_is_floating(Dtype dtype);

}  // namespace qrepack
