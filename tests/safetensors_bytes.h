// Builds safetensors files byte by byte for tests, independently of the writer under test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qrepack::testing {

/// 8-byte little-endian N, then `header` verbatim (no padding added), then `data_bytes` bytes
/// of data (value i & 0xFF at data offset i).
inline std::vector<std::uint8_t> safetensors_bytes(const std::string& header,
                                                   std::size_t data_bytes) {
  std::vector<std::uint8_t> out;
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<std::uint8_t>(i & 0xFF));
  return out;
}

}  // namespace qrepack::testing
