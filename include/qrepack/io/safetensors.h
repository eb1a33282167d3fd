// safetensors: reading. Byte layout (reference/serialization.md A1; docs/formats/safetensors.md):
//   u64 little-endian N | N bytes of UTF-8 JSON header | data buffer
// Each header entry is {"dtype", "shape", "data_offsets": [begin, end)} relative to the data
// buffer; "__metadata__" is an optional string->string object. The entries must tile the data
// buffer exactly: no gaps, no overlaps, no trailing bytes.
// Parsing and validation are pure functions over the header bytes and the file size; no tensor
// byte is read until they pass.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qrepack/core/arena.h"
#include "qrepack/core/dtype.h"
#include "qrepack/core/error.h"
#include "qrepack/core/name_index.h"
#include "qrepack/io/byte_source.h"

namespace qrepack {

/// Largest header accepted, as the reference crate (MAX_HEADER_SIZE).
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;
/// Tensors in one file (a real shard holds a few thousand; GLM-5.2 has 117k in ~140 shards).
inline constexpr std::size_t kMaxSafetensorsTensors = 262'144;
/// Bytes of a tensor name (real names are under 200).
inline constexpr std::size_t kMaxTensorNameBytes = 4096;
/// Bytes of all __metadata__ keys and values together (real files carry a few dozen).
inline constexpr std::uint64_t kMaxSafetensorsMetadataBytes = 16ull << 20;

/// One tensor of a safetensors file: where its bytes are, what they mean. The name and shape
/// view the header's arena (they live as long as any copy of the header). 48 bytes, as a
/// checkpoint holds one per tensor: the end offset is derived from the shape (the reader
/// checks that the file's end offset equals it).
struct TensorEntry {
  std::string_view name;
  std::span<const std::uint64_t> shape;
  std::uint64_t begin = 0;  ///< relative to the data buffer
  Dtype dtype;
  /// Bytes of the data: the shape's elements at the dtype's width (checked to fit 64 bits).
  std::uint64_t byte_size() const;
  std::uint64_t end() const { return begin + byte_size(); }  ///< exclusive
  std::uint64_t numel() const;
};

struct SafetensorsHeader {
  std::uint64_t header_length = 0;  ///< N
  std::uint64_t file_size = 0;
  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> tensors;  ///< sorted by data offset (file order)
  /// Holds the entries' names and shapes; shared by copies of the header.
  std::shared_ptr<Arena> arena = std::make_shared<Arena>();
  std::uint64_t data_start() const { return 8 + header_length; }
};

/// Stage 1, pure: validates the 8-byte prefix against the file size and returns N.
/// `prefix` holds min(8, file_size) bytes.
Result<std::uint64_t> parse_safetensors_prefix(std::span<const std::uint8_t> prefix,
                                               std::uint64_t file_size);

/// Stage 2, pure: parses and validates the N header bytes for a file of `file_size` bytes.
/// Errors name the tensor and rule; the file name is added by the caller.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::uint8_t> header,
                                                   std::uint64_t file_size);

/// An open safetensors file: validated header plus its byte source for reads.
class SafetensorsFile {
 public:
  /// Opens and validates `path`; only the header is read.
  static Result<SafetensorsFile> open(const std::string& path);
  /// Validates a file held by any source (tests use MemorySource).
  static Result<SafetensorsFile> from_source(std::shared_ptr<const ByteSource> source);

  const std::string& path() const { return source_->name(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorEntry>& tensors() const { return header_.tensors; }
  const ByteSource& source() const { return *source_; }

  /// Reads bytes [offset, offset + out.size()) of `tensor` into `out` (pread; the caller owns
  /// and reuses the buffer).
  Status read(const TensorEntry& tensor, std::uint64_t offset, std::span<std::uint8_t> out) const;

 private:
  SafetensorsFile(std::shared_ptr<const ByteSource> source, SafetensorsHeader header)
      : source_(std::move(source)), header_(std::move(header)) {}
  std::shared_ptr<const ByteSource> source_;
  SafetensorsHeader header_;
};

}  // namespace qrepack
