#include "qrepack/formats/int4.h"

#include <gtest/gtest.h>

#include <vector>

namespace qrepack {
namespace {

TEST(Int4, OffsetBinaryStoresQPlus8) {
  for (int q = -8; q <= 7; ++q) {
    EXPECT_EQ(int4_encode(q), static_cast<std::uint8_t>(q + 8)) << q;
    EXPECT_EQ(int4_decode(int4_encode(q)), q);
  }
  EXPECT_EQ(int4_encode(0), kInt4ZeroNibble);
  EXPECT_EQ(int4_encode(-8), 0x0);
  EXPECT_EQ(int4_encode(7), 0xF);
}

TEST(Int8, TwosComplement) {
  for (int q = -128; q <= 127; ++q) EXPECT_EQ(int8_decode(int8_encode(q)), q);
  EXPECT_EQ(int8_encode(-1), 0xFF);
  EXPECT_EQ(int8_encode(-128), 0x80);
}

TEST(Nibbles, EvenElementInLowNibbleAndOddCountPads) {
  // Row q = [-8, -1, 0, 3, 7] -> nibbles [0, 7, 8, B, F].
  const std::vector<std::uint8_t> codes = {int4_encode(-8), int4_encode(-1), int4_encode(0),
                                           int4_encode(3), int4_encode(7)};
  std::vector<std::uint8_t> packed(packed_nibble_bytes(codes.size()));
  ASSERT_EQ(packed.size(), 3u);
  pack_nibbles(codes, packed);
  EXPECT_EQ(packed[0], 0x70);  // element 0 (0x0) low, element 1 (0x7) high
  EXPECT_EQ(packed[1], 0xB8);
  EXPECT_EQ(packed[2], 0x0F);  // element 4 low, high nibble 0 as the engine's converter writes
  std::vector<std::uint8_t> back(codes.size());
  unpack_nibbles(packed, back);
  EXPECT_EQ(back, codes);
}

TEST(Nibbles, OddTailPadsZeroForEveryElementFormat) {
  // Offset-binary zero is 0x8, but the pad is not an element: 0 like the engine's converter.
  const std::vector<std::uint8_t> codes = {kInt4ZeroNibble};
  std::vector<std::uint8_t> packed(1);
  pack_nibbles(codes, packed);
  EXPECT_EQ(packed[0], 0x08);
  EXPECT_EQ(nibble_at(packed.data(), 0), 0x8);
  EXPECT_EQ(pack_nibble_pair(0x3, 0xC), 0xC3);
}

TEST(Nibbles, EvenCountHasNoPadding) {
  const std::vector<std::uint8_t> codes = {0x1, 0x2, 0x3, 0x4};
  std::vector<std::uint8_t> packed(2);
  pack_nibbles(codes, packed);
  EXPECT_EQ(packed[0], 0x21);
  EXPECT_EQ(packed[1], 0x43);
}

}  // namespace
}  // namespace qrepack
