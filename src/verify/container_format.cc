#include "qrepack/verify/container_format.h"

#include <fmt/format.h>

#include <array>
#include <vector>

#include "io/json_strict.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/schemes/e8_iq3.h"
#include "qrepack/schemes/fp8_block.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/schemes/scheme.h"

namespace qrepack {
namespace {

__extension__ using U128 = unsigned __int128;  // byte counts of [O, I] never overflow
using CF = ContainerFormat;

constexpr std::uint64_t kFp8BlockSize = 128;

struct RegistryRow {
  std::string_view name;
  int ordinal;
};
// The engine's FMT_NAMES (docs/FORMATS.md): the names a stamp may carry.
constexpr std::array<RegistryRow, 8> kRegistry = {{{"f32", 0},
                                                   {"int8-row", 1},
                                                   {"int4-row", 2},
                                                   {"int2-row", 3},
                                                   {"int4-grouped", 4},
                                                   {"int3-g64", 5},
                                                   {"e8-iq3-lattice", 6},
                                                   {"fp8-e4m3-b128", 8}}};

U128 blocks(std::uint64_t n, std::uint64_t b) { return (U128{n} + b - 1) / b; }

Error refuse(std::string_view rule, std::string message) {
  return std::move(Error(ErrorKind::kUnexpectedShape, std::move(message))
                       .with_rule(fmt::format("container.{}", rule)));
}

std::string shape_text(std::uint64_t o, std::uint64_t i, std::uint64_t nb, std::uint64_t ns) {
  return fmt::format("[{}, {}] with {} weight bytes and {} scale bytes", o, i, nb, ns);
}

// The fmt=6 tag (ns == 4 and 98-byte blocks) and what else those byte counts can be at I = 98.
std::optional<Result<CF>> resolve_e8(std::uint64_t o, std::uint64_t i, std::uint64_t nb,
                                     std::uint64_t ns, std::optional<int> sf) {
  if (ns != 4 || U128{nb} != U128{o} * blocks(i, kE8Block) * kE8BlockBytes) return std::nullopt;
  const bool raw = U128{nb} == U128{o} * i;
  const U128 nblk = blocks(o, kFp8BlockSize) * blocks(i, kFp8BlockSize);
  const bool fp8_f32 = raw && nblk == 1, fp8_ue8m0 = raw && nblk == 4, int8 = raw && o == 1;
  if (!fp8_f32 && !fp8_ue8m0 && !int8) return Result<CF>(CF{CF::kE8Iq3});
  if (sf == 6) return Result<CF>(CF{CF::kE8Iq3});
  if (sf == 8 && fp8_f32) return Result<CF>(CF{CF::kFp8Block});
  if (sf == 1 && int8) return Result<CF>(CF{CF::kInt8Row});
  return Result<CF>(refuse("e8_collision",
                           fmt::format("{} matches E8/IQ3 (fmt 6) and also {}; the engine refuses "
                                       "rather than guesses without a stamp naming one of them",
                                       shape_text(o, i, nb, ns),
                                       fp8_f32 ? "fp8-e4m3-b128 with one f32 block scale"
                                       : int8  ? "int8-row (O = 1)"
                                               : "fp8-e4m3-b128 with UE8M0 scales")));
}

// int8-row against fp8-e4m3-b128: the same weight bytes, told apart by the scale count.
Result<CF> resolve_raw_bytes(std::uint64_t o, std::uint64_t i, std::uint64_t ns,
                             std::optional<int> sf, bool stamped) {
  const U128 nblk = blocks(o, kFp8BlockSize) * blocks(i, kFp8BlockSize);
  const bool row = U128{ns} == U128{o} * 4, blk = U128{ns} == nblk * 4, ue8m0 = U128{ns} == nblk;
  if (row && blk) {
    if (sf == 8) return CF{CF::kFp8Block};
    if (sf == 1 || !stamped) return CF{CF::kInt8Row};  // unstamped: int8-row, the incumbent
    return refuse("fp8_collision",
                  fmt::format("[{}, {}]: {} scale bytes fit both int8-row and fp8-e4m3-b128, and "
                              "the stamp names neither",
                              o, i, ns));
  }
  if (ue8m0) {
    if (sf == 1 && row) return CF{CF::kInt8Row};
    return refuse("fp8_ue8m0", fmt::format("[{}, {}]: fp8-e4m3-b128 with UE8M0 block scales ({} "
                                           "bytes) is recognised but not loaded by the engine",
                                           o, i, ns));
  }
  if (blk && !row) return CF{CF::kFp8Block};
  return CF{CF::kInt8Row};
}

}  // namespace

std::string ContainerFormat::name() const {
  switch (kind) {
    case kInt8Row:
      return "int8-row";
    case kInt4Row:
      return "int4-row";
    case kInt2Row:
      return "int2-row";
    case kInt4Group:
      return fmt::format("int4-g{}", group);
    case kInt3G64:
      return "int3-g64";
    case kE8Iq3:
      return "e8-iq3";
    case kFp8Block:
      return std::string(kFp8StampName);
  }
  return "?";
}

int ContainerFormat::ordinal() const {
  static constexpr std::array<int, 7> kOrdinals = {1, 2, 3, 4, 5, 6, 8};
  return kOrdinals[kind];
}

std::string_view ContainerFormat::registry_name() const {
  for (const RegistryRow& r : kRegistry) {
    if (r.ordinal == ordinal()) return r.name;
  }
  return "?";
}

std::uint64_t ContainerFormat::row_bytes(std::uint64_t cols) const {
  switch (kind) {
    case kInt8Row:
    case kFp8Block:
      return cols;
    case kInt4Row:
    case kInt4Group:
      return (cols + 1) / 2;
    case kInt2Row:
      return int2_row_bytes(cols);
    case kInt3G64:
      return int3_row_bytes(cols);
    case kE8Iq3:
      return (cols + kE8Block - 1) / kE8Block * kE8BlockBytes;
  }
  return 0;
}

std::uint64_t ContainerFormat::scale_count(std::uint64_t rows, std::uint64_t cols) const {
  switch (kind) {
    case kInt4Group:
      return rows * ((cols + group - 1) / group);
    case kInt3G64:
      return rows * ((cols + kInt3Group - 1) / kInt3Group);
    case kE8Iq3:
      return 1;
    case kFp8Block:
      return ((rows + kFp8BlockSize - 1) / kFp8BlockSize) *
             ((cols + kFp8BlockSize - 1) / kFp8BlockSize);
    default:
      return rows;
  }
}

std::optional<int> registry_ordinal(std::string_view name) {
  for (const RegistryRow& r : kRegistry) {
    if (r.name == name) return r.ordinal;
  }
  return std::nullopt;
}

Result<ContainerFormat> resolve_container_format(std::uint64_t o, std::uint64_t i, std::uint64_t nb,
                                                 std::uint64_t ns, const std::string* stamp) {
  const std::optional<int> sf = stamp ? registry_ordinal(*stamp) : std::nullopt;
  auto resolved = resolve_e8(o, i, nb, ns, sf);
  if (!resolved) {
    const U128 n = nb;
    CF cf{CF::kInt8Row};
    if (n == U128{o} * i) {
      QR_ASSIGN_OR_RETURN(raw, resolve_raw_bytes(o, i, ns, sf, stamp != nullptr));
      cf = raw;
    } else if (n == U128{o} * ((U128{i} + 1) / 2)) {
      cf = CF{CF::kInt4Row};
      if (U128{ns} > U128{o} * 4) {  // the engine's detect_group_size, finest first
        for (std::uint64_t g : engine_group_sizes()) {
          if (g > i) break;
          if (U128{ns} == U128{o} * blocks(i, g) * 4) {
            cf = CF{CF::kInt4Group, g};
            break;
          }
        }
      }
    } else if (n == U128{o} * blocks(i, 4)) {
      cf = CF{CF::kInt2Row};
    } else if (n == U128{o} * blocks(i, kInt3Group) * kInt3GroupBytes) {
      cf = CF{CF::kInt3G64};
    } else {
      return refuse("no_layout", fmt::format("{}: no int8/int4/int2/int3-g64/fp8 layout fits",
                                             shape_text(o, i, nb, ns)));
    }
    if (U128{ns} != U128{cf.scale_count(o, i)} * 4) {
      return refuse("scale_count",
                    fmt::format("{}: {} expects {} scale floats", shape_text(o, i, nb, ns),
                                cf.name(), cf.scale_count(o, i)));
    }
    resolved = cf;
  }
  if (!resolved->ok()) return std::move(*resolved);
  const CF cf = **resolved;
  if (stamp && sf != cf.ordinal()) {  // qt_verify_fmt_stamp
    return refuse(
        sf ? "stamp_mismatch" : "stamp_unknown",
        fmt::format("[{}, {}]: stamped \"{}\" but the bytes say {}", o, i, *stamp, cf.name()));
  }
  return cf;
}

Result<FormatStamps> read_format_stamps(const Checkpoint& ck) {
  FormatStamps out;
  for (const SafetensorsFile& shard : ck.shards()) {
    const auto it = shard.header().metadata.find(std::string(kFormatStampKey));
    if (it == shard.header().metadata.end()) continue;
    const auto bad = [&](std::string why) {
      return Error(ErrorKind::kInvalidMetadata,
                   fmt::format("__metadata__[\"{}\"] {}", kFormatStampKey, why))
          .in_file(shard.path())
          .with_rule("container.stamp_map");
    };
    auto j = parse_json_strict(it->second, ErrorKind::kInvalidMetadata);
    if (!j.ok() || !j->is_object()) return bad("is not a JSON object");
    for (const auto& [name, value] : j->items()) {
      if (!value.is_string())
        return bad(fmt::format("gives '{}' a value that is not a string", name));
      const auto [pos, fresh] = out.emplace(name, value.get<std::string>());
      if (!fresh && pos->second != value.get<std::string>()) {
        return bad(fmt::format("stamps '{}' as \"{}\" where another shard says \"{}\"", name,
                               value.get<std::string>(), pos->second));
      }
      if (out.size() > kMaxFormatStamps) {
        return bad(fmt::format("stamps more than {} tensors (the engine's cap)", kMaxFormatStamps));
      }
    }
  }
  return out;
}

const std::string* find_stamp(const FormatStamps& stamps, std::string_view name) {
  const auto it = stamps.find(std::string(name));
  return it == stamps.end() ? nullptr : &it->second;
}

Status read_container_rows(const Checkpoint& ck, const TensorRef& weight, const TensorRef& scales,
                           const ContainerFormat& cf, std::uint64_t cols, std::uint64_t row0,
                           std::uint64_t n, std::span<float> out) {
  if (cf.kind == CF::kE8Iq3 && cols % kE8Block != 0) {
    return refuse(
        "e8_partial_block",
        fmt::format("E8/IQ3 rows of {} columns (not a multiple of 256) are not decoded", cols));
  }
  const std::uint64_t rb = cf.row_bytes(cols);
  std::vector<std::uint8_t> packed(n * rb);
  QR_TRY(ck.read(weight, row0 * rb, packed));
  if (cf.kind == CF::kE8Iq3) {  // decoded in the rotated basis, then rotated back
    for (std::uint64_t r = 0; r < n; ++r) {
      const auto dst = out.subspan(r * cols, cols);
      e8_decode_row(std::span<const std::uint8_t>(packed).subspan(r * rb, rb), dst);
      e8_unrotate_row(dst);
    }
    return ok_status();
  }
  if (cf.kind == CF::kFp8Block) {  // the scales of the 128-row blocks holding these rows
    const std::uint64_t nbi = (cols + kFp8BlockSize - 1) / kFp8BlockSize,
                        skip = row0 % kFp8BlockSize;
    const Fp8BlockShape local{skip + n, cols};
    std::vector<float> s(local.scale_rows() * nbi);
    QR_TRY(ck.read(scales, row0 / kFp8BlockSize * nbi * 4,
                   std::span(reinterpret_cast<std::uint8_t*>(s.data()), s.size() * 4)));
    fp8_block_decode_rows(packed, s, local, skip, out);
    return ok_status();
  }
  const std::uint64_t per_row = cf.scale_count(1, cols);
  std::vector<float> s(n * per_row);
  QR_TRY(ck.read(scales, row0 * per_row * 4,
                 std::span(reinterpret_cast<std::uint8_t*>(s.data()), s.size() * 4)));
  for (std::uint64_t r = 0; r < n; ++r) {
    const auto bytes = std::span<const std::uint8_t>(packed).subspan(r * rb, rb);
    const auto sc = std::span<const float>(s).subspan(r * per_row, per_row);
    const auto dst = out.subspan(r * cols, cols);
    switch (cf.kind) {
      case CF::kInt8Row:
        int8_decode_row(bytes, sc[0], dst);
        break;
      case CF::kInt2Row:
        int2_decode_row(bytes, sc[0], dst);
        break;
      case CF::kInt3G64:
        int3_decode_row(bytes, sc, dst);
        break;
      default:
        int4_decode_row(bytes, sc, cf.kind == CF::kInt4Group ? cf.group : 0, dst);
        break;
    }
  }
  return ok_status();
}

}  // namespace qrepack
