// GGUF (ggml's single-file model format, versions 2 and 3; docs/formats/source-encodings.md
// "GGUF"): little-endian throughout.
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count
//   kv_count x (string key, u32 value_type, value)       string = u64 length + UTF-8 bytes
//   tensor_count x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset)
//   padding to general.alignment (u32, default 32), then the data section; each tensor at
//   data_start + offset, offset a multiple of the alignment.
// dims are stored fastest-varying first: a PyTorch [out, in] weight is dims [in, out].
// Every count, length, dim, offset and span is checked against the file size and the named
// caps below before anything is allocated; nested arrays are parsed without recursion.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/byte_source.h"

namespace qrepack {

/// Tensors in one GGUF file.
inline constexpr std::uint64_t kMaxGgufTensors = 262'144;
/// Metadata key/value pairs in one file.
inline constexpr std::uint64_t kMaxGgufKeys = 65'536;
/// Metadata values in one file, counting every array element (a 256k-token vocabulary with
/// its merges, types and scores is about 10^6); each costs about 80 bytes parsed.
inline constexpr std::uint64_t kMaxGgufValues = std::uint64_t{1} << 22;
/// Bytes of one metadata string (chat templates run to tens of kB).
inline constexpr std::uint64_t kMaxGgufStringBytes = std::uint64_t{16} << 20;
/// Bytes of a key or a tensor name.
inline constexpr std::uint64_t kMaxGgufNameBytes = 4096;
/// Arrays inside arrays (ggml itself reads none; gguf-py writes them).
inline constexpr std::size_t kMaxGgufArrayDepth = 4;
/// Dimensions of a tensor (GGML_MAX_DIMS).
inline constexpr std::uint32_t kMaxGgufDims = 4;
/// Largest general.alignment accepted.
inline constexpr std::uint64_t kMaxGgufAlignment = std::uint64_t{1} << 20;

/// GGUF metadata value types (the numbers on disk).
enum class GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_type_name(GgufType t);

struct GgufArray;

/// One metadata value: an integer (bits in `u`; signed types sign-extended), a float (`f`,
/// f32 widened exactly), a bool (`u` 0 or 1), a string, or an array.
struct GgufValue {
  GgufType type = GgufType::kU8;
  std::uint64_t u = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<GgufArray> array;
  bool is_integer() const;
  bool is_signed() const;
  bool is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
  std::int64_t as_i64() const { return static_cast<std::int64_t>(u); }
};

struct GgufArray {
  GgufType element = GgufType::kU8;
  std::vector<GgufValue> items;
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

/// One tensor's header entry, checked: its type is in the ggml table, dims[0] a whole number
/// of blocks, its bytes inside the file and overlapping no other tensor.
struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> dims;  ///< as stored: fastest-varying first
  std::uint32_t ggml_type = 0;
  std::uint64_t offset = 0;  ///< relative to the data section
  std::uint64_t numel = 0;
  std::uint64_t bytes = 0;
  std::uint64_t file_offset = 0;  ///< data_start + offset
  std::uint32_t part = 0;         ///< which file of a split GGUF holds it (0: the first)
  /// False for a ggml type id past qrepack's table (kFirstNewerGgmlType and up): its block
  /// size is unknown, so is `bytes` (0); it is listed, never read.
  bool sized = true;
};

/// ggml type ids from here on are newer than qrepack's table (the last it knows is MXFP4, 39);
/// ids up to kMaxGgmlType are accepted as such, larger ones refused.
inline constexpr std::uint32_t kFirstNewerGgmlType = 40, kMaxGgmlType = 1023;

struct GgufHeader {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_start = 0;
  std::uint64_t file_size = 0;
  std::vector<GgufKv> metadata;     ///< file order
  std::vector<GgufTensor> tensors;  ///< file order
  const GgufValue* find(std::string_view key) const;
  const GgufTensor* tensor(std::string_view name) const;
};

/// Parses and validates a whole header read from `source` (file name added to errors).
Result<GgufHeader> parse_gguf(const ByteSource& source);

/// An open GGUF checkpoint: its validated header and the sources its tensor bytes are read
/// from. A split GGUF (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf ...) is one
/// checkpoint: the first part's metadata, every part's tensors in part order, file_size the
/// parts' sum (src/io/gguf_split.cc).
class GgufFile {
 public:
  /// Opens `path`; a part of a split GGUF opens every part of its set.
  static Result<GgufFile> open(const std::string& path);
  static Result<GgufFile> from_source(std::shared_ptr<const ByteSource> source);
  /// The first (or only) file.
  const std::string& path() const { return sources_.front()->name(); }
  /// Every file, in part order.
  std::vector<std::string> paths() const;
  const GgufHeader& header() const { return header_; }
  /// Reads `out.size()` bytes of `t`'s data starting `offset` bytes into it.
  Status read(const GgufTensor& t, std::uint64_t offset, std::span<std::uint8_t> out) const;
  /// Every file's source, in part order (a tensor's bytes are at its file_offset in
  /// sources()[part]).
  std::vector<const ByteSource*> sources() const {
    std::vector<const ByteSource*> out;
    for (const auto& s : sources_) out.push_back(s.get());
    return out;
  }

 private:
  friend Result<GgufFile> open_gguf_split(const std::string& path);
  GgufFile(std::vector<std::shared_ptr<const ByteSource>> s, GgufHeader h)
      : sources_(std::move(s)), header_(std::move(h)) {}
  std::vector<std::shared_ptr<const ByteSource>> sources_;
  GgufHeader header_;
};

/// A split GGUF's file name: PREFIX-NNNNN-of-MMMMM.gguf (five digits each, 1 <= N <= M).
struct GgufSplitName {
  std::string prefix;
  std::uint32_t part = 0, count = 0;  ///< part 1-based
};
std::optional<GgufSplitName> gguf_split_name(std::string_view file_name);
/// Opens every part of the split set `path` belongs to and checks them as one checkpoint:
/// every part present, its split.no / split.count as its name says, split.tensors.count the
/// tensors of all parts, no tensor name in two parts (rule gguf.split).
Result<GgufFile> open_gguf_split(const std::string& path);

/// Whether `path` names a GGUF source: a file ending in .gguf, or a directory holding .gguf
/// files and no .safetensors file.
bool is_gguf_source(const std::string& path);
/// The one .gguf file `path` names (itself, or the only one in a directory, or the first part
/// when the directory holds exactly one split set); a directory with none or several is an
/// error naming them.
Result<std::string> resolve_gguf_file(const std::string& path);

}  // namespace qrepack
