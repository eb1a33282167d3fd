// Pieces of the GGUF reader shared by its files (src/io/gguf_*.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/io/gguf.h"

namespace qrepack::gguf_detail {

/// Reads a ByteSource front to back through a buffer; never past the end.
class Cursor {
 public:
  explicit Cursor(const ByteSource& s);
  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }
  /// Makes `need` bytes at pos() readable; past the end is gguf.truncated naming `what`.
  Status fill(std::uint64_t need, std::string_view what);
  Status bytes(void* out, std::uint64_t n, std::string_view what);
  Result<std::uint64_t> u64(std::string_view what);
  Result<std::uint32_t> u32(std::string_view what);
  /// A u64 length (at most `cap`) and that many UTF-8 bytes.
  Result<std::string> string(std::uint64_t cap, std::string_view what);

 private:
  static constexpr std::uint64_t kChunk = 64 * 1024;
  const ByteSource& source_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::uint64_t buf_at_ = 0;
  std::vector<std::uint8_t> buf_;
};

/// Bytes a metadata value of type `t` takes before its payload: a scalar's width, a string's
/// u64 length, an array's element type and count.
std::uint64_t scalar_width(GgufType t);

/// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

/// Checks the parsed header whose tensor infos end at byte `infos_end`: alignment, types,
/// shapes, offsets, spans, duplicates and overlaps; fills data_start and each tensor's sizes.
Status validate(GgufHeader& h, std::uint64_t infos_end);

}  // namespace qrepack::gguf_detail
