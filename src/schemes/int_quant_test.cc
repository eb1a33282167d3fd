#include "qrepack/schemes/int_quant.h"

#include <gtest/gtest.h>

#include <vector>

namespace qrepack {
namespace {

// A 1x5 row derived by hand: amax 3.5 -> s = 0.5; w/s = [2, -7, 1, 7, -2.5] ->
// q = [2, -7, 1, 7, -2] (rint half-even: -2.5 -> -2) -> nibbles [A, 1, 9, F, 6]
// -> bytes 0x1A, 0xF9, 0x06 (odd length: last high nibble 0).
TEST(Int4, OneByFiveRowPerRow) {
  const std::vector<float> w = {1.0f, -3.5f, 0.5f, 3.5f, -1.25f};
  std::vector<std::uint8_t> packed(3);
  std::vector<float> s(1);
  int4_encode_row(w, 0, packed, s);
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0x1A, 0xF9, 0x06}));
  std::vector<float> back(5);
  int4_decode_row(packed, s, 0, back);
  EXPECT_EQ(back, (std::vector<float>{1.0f, -3.5f, 0.5f, 3.5f, -1.0f}));
}

// Groups of 2 over 5 columns: [1, -3.5] [0.5, 3.5] [-1.25].
TEST(Int4, GroupedScalesAndTheShortLastGroup) {
  const std::vector<float> w = {1.0f, -3.5f, 0.5f, 3.5f, -1.25f};
  std::vector<std::uint8_t> packed(3);
  std::vector<float> s(3);
  int4_encode_row(w, 2, packed, s);
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_EQ(s[1], 0.5f);
  EXPECT_EQ(s[2], 1.25f / 7.0f);
  // group 0: [2, -7] -> A, 1; group 1: [1, 7] -> 9, F; group 2: -1.25/(1.25/7) = -7 -> 1.
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0x1A, 0xF9, 0x01}));
}

TEST(Int4, ClampIsMinus8To7AndZeroRowsUseTheFloorScale) {
  // amax/7 scale: -amax maps to -7, never -8; but a value rounding past 7 is impossible, so
  // check the floor scale and that all-zero rows give q = 0 (nibble 8).
  const std::vector<float> zero = {0.0f, 0.0f, 0.0f};
  std::vector<std::uint8_t> packed(2);
  std::vector<float> s(1);
  int4_encode_row(zero, 0, packed, s);
  EXPECT_EQ(s[0], 1e-8f);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0x88, 0x08}));
}

TEST(Int4, TiesRoundHalfToEven) {
  // amax 7 -> s = 1; 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2, 7.
  const std::vector<float> w = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 7.0f};
  std::vector<std::uint8_t> packed(3);
  std::vector<float> s(1);
  int4_encode_row(w, 0, packed, s);
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0xA8, 0x8A, 0xF6}));
}

TEST(Int8, PerRowTwosComplement) {
  // amax 12.7 -> s ~= 0.1; w/s ~= [127, -127, 5, 3.3] -> [127, -127, 5, 3].
  const std::vector<float> w = {12.7f, -12.7f, 0.5f, 0.33f};
  std::vector<std::uint8_t> out(4);
  const float s = int8_encode_row(w, out);
  EXPECT_EQ(s, 12.7f / 127.0f);
  EXPECT_EQ(out[0], 127);
  EXPECT_EQ(out[1], 0x81);  // -127
  EXPECT_EQ(out[2], 5);
  EXPECT_EQ(out[3], 3);
  std::vector<float> back(4);
  int8_decode_row(out, s, back);
  EXPECT_FLOAT_EQ(back[1], -127 * s);
}

}  // namespace
}  // namespace qrepack
