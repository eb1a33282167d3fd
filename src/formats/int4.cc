#include "qrepack/formats/int4.h"

#include "core/check.h"

namespace qrepack {

void pack_nibbles(std::span<const std::uint8_t> codes, std::span<std::uint8_t> out) {
  QR_CHECK(out.size() == packed_nibble_bytes(codes.size()), "pack_nibbles: output size");
  const std::size_t pairs = codes.size() / 2;
  for (std::size_t j = 0; j < pairs; ++j) out[j] = pack_nibble_pair(codes[2 * j], codes[2 * j + 1]);
  if (codes.size() % 2 != 0) out[pairs] = pack_nibble_pair(codes.back(), 0);
}

void unpack_nibbles(std::span<const std::uint8_t> packed, std::span<std::uint8_t> codes) {
  QR_CHECK(packed.size() == packed_nibble_bytes(codes.size()), "unpack_nibbles: input size");
  for (std::size_t i = 0; i < codes.size(); ++i) {
    codes[i] = nibble_at(packed.data(), i);
  }
}

}  // namespace qrepack
