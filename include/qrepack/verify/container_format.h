// How the C engine infers a quantized weight's format from byte counts (no format id is stored;
// reference/colibri.md §3.5, the engine's docs/FORMATS.md registry): weight bytes nb and scale
// bytes ns against the config's [O, I], with the collisions between formats resolved as its
// qt_resolve_fmt does, and the optional per-tensor stamp __metadata__["colibri.fmt"] checked as
// its qt_verify_fmt_stamp does (trust, verify, refuse). One mechanism for every reader of an
// engine container: check-load, verify, the reference forward pass, and convert's own check
// that what it writes reads back as the format it meant.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "qrepack/core/error.h"

namespace qrepack {

class Checkpoint;
struct TensorRef;

struct ContainerFormat {
  enum Kind { kInt8Row, kInt4Row, kInt2Row, kInt4Group, kInt3G64, kE8Iq3, kFp8Block } kind;
  std::uint64_t group = 0;  ///< kInt4Group
  /// "int8-row", "int4-row", "int2-row", "int4-g64", "int3-g64", "e8-iq3", "fp8-e4m3-b128".
  std::string name() const;
  /// The engine's ordinal (1, 2, 3, 4, 5, 6, 8).
  int ordinal() const;
  /// The registry name a stamp uses ("int4-grouped" for every group size).
  std::string_view registry_name() const;
  /// Bytes of one stored row (0 for kE8Iq3 and kFp8Block's scales, which are not per row).
  std::uint64_t row_bytes(std::uint64_t cols) const;
  /// Scale floats covering `rows` x `cols`.
  std::uint64_t scale_count(std::uint64_t rows, std::uint64_t cols) const;
  bool operator==(const ContainerFormat&) const = default;
};

/// The registry's ordinal for a stamp name, or nullopt when the engine does not know it.
std::optional<int> registry_ordinal(std::string_view name);

/// The stamp key of a shard's __metadata__ and the one format qrepack stamps.
inline constexpr std::string_view kFormatStampKey = "colibri.fmt";
inline constexpr std::string_view kContainerFormatsKey = "colibri.container.formats";
inline constexpr std::string_view kFp8StampName = "fp8-e4m3-b128";
/// Stamped tensors a container may carry in all (the engine's ST_FMT_STAMP_MAX).
inline constexpr std::size_t kMaxFormatStamps = 4096;

/// qt_resolve_fmt then qt_verify_fmt_stamp: the format the engine reads, or the refusal it
/// prints (kUnexpectedShape, rule "container.<why>"). `stamp` is the tensor's stamp or null.
Result<ContainerFormat> resolve_container_format(std::uint64_t rows, std::uint64_t cols,
                                                 std::uint64_t weight_bytes,
                                                 std::uint64_t scale_bytes,
                                                 const std::string* stamp = nullptr);

/// Tensor name -> stamped format name, merged over every shard as the engine ingests them: a
/// value that is not a JSON object of strings, two shards stamping one tensor differently, or
/// more than kMaxFormatStamps entries is refused.
using FormatStamps = std::unordered_map<std::string, std::string>;
Result<FormatStamps> read_format_stamps(const Checkpoint& ck);

/// The stamp of `name`, or null.
const std::string* find_stamp(const FormatStamps& stamps, std::string_view name);

/// Decodes rows [row0, row0 + n) of a container weight of `cols` columns into `out` (n * cols).
/// kE8Iq3 rows are decoded and rotated back to the weight's own basis (cols % 256 == 0; other
/// widths: kUnexpectedShape, rule container.e8_partial_block).
Status read_container_rows(const Checkpoint& ck, const TensorRef& weight, const TensorRef& scales,
                           const ContainerFormat& cf, std::uint64_t cols, std::uint64_t row0,
                           std::uint64_t n, std::span<float> out);

}  // namespace qrepack
