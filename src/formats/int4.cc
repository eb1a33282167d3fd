#include "qrepack/formats/int4.h"

#include "core/check.h"

namespace qrepack {

void pack_nibbles(std::span<const std::uint8_t> codes, std::span<std::uint8_t> out,
                  std::uint8_t pad_code) {
  QR_CHECK(out.size() == packed_nibble_bytes(codes.size()), "pack_nibbles: output size");
  const std::size_t pairs = codes.size() / 2;
  for (std::size_t j = 0; j < pairs; ++j) {
    out[j] = static_cast<std::uint8_t>((codes[2 * j] & 0x0F) | ((codes[2 * j + 1] & 0x0F) << 4));
  }
  if (codes.size() % 2 != 0) {
    out[pairs] = static_cast<std::uint8_t>((codes.back() & 0x0F) | ((pad_code & 0x0F) << 4));
  }
}

void unpack_nibbles(std::span<const std::uint8_t> packed, std::span<std::uint8_t> codes) {
  QR_CHECK(packed.size() == packed_nibble_bytes(codes.size()), "unpack_nibbles: input size");
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::uint8_t byte = packed[i / 2];
    codes[i] = (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  }
}

}  // namespace qrepack
