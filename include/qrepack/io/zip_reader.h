// Reads the central directory of a zip archive as torch.save writes it (STORED entries,
// ZIP64 end records; reference/serialization.md B2-B3). Entries are references to byte ranges
// of the file; compressed entries are refused (torch never writes them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/byte_source.h"

namespace qrepack {

struct ZipEntry {
  std::string name;
  std::uint64_t data_offset = 0;  ///< absolute offset of the stored bytes
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;
};

class ZipReader {
 public:
  static Result<ZipReader> open(std::shared_ptr<const ByteSource> source);
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  const ByteSource& source() const { return *source_; }
  /// Reads a whole (small) entry and checks its CRC32.
  Result<std::vector<std::uint8_t>> read_checked(const ZipEntry& e, std::uint64_t cap) const;

 private:
  std::shared_ptr<const ByteSource> source_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, std::size_t> by_name_;
};

/// Cap on central-directory entries (a .pt holds one record per storage plus three).
inline constexpr std::uint64_t kMaxZipEntries = 1'000'000;

}  // namespace qrepack
