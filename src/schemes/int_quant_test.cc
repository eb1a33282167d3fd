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

// int2 (engine fmt 3), derived by hand: amax 3.5 -> s = 3.5; w/s = [0.29, -1, 0.14, 1, -0.36]
// -> q = [0, -1, 0, 1, 0] -> codes q+2 = [2, 1, 2, 3, 2]; element e at bits (e&3)*2 of byte
// e>>2: byte 0 = 2 | 1<<2 | 2<<4 | 3<<6 = 0xE6, byte 1 = 2 (unused pairs 0).
TEST(Int2, OneByFiveRow) {
  const std::vector<float> w = {1.0f, -3.5f, 0.5f, 3.5f, -1.25f};
  std::vector<std::uint8_t> packed(int2_row_bytes(5));
  const float s = int2_encode_row(w, packed);
  EXPECT_EQ(s, 3.5f);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0xE6, 0x02}));
  std::vector<float> back(5);
  int2_decode_row(packed, s, back);
  EXPECT_EQ(back, (std::vector<float>{0.0f, -3.5f, 0.0f, 3.5f, 0.0f}));
  // Ties to even: s = 1; 0.5 -> 0, -0.5 -> 0, 1 -> 1, -1 -> -1 -> codes 2, 2, 3, 1.
  const std::vector<float> t = {0.5f, -0.5f, 1.0f, -1.0f};
  std::vector<std::uint8_t> tp(1);
  EXPECT_EQ(int2_encode_row(t, tp), 1.0f);
  EXPECT_EQ(tp[0], 2 | 2 << 2 | 3 << 4 | 1 << 6);
}

// int3-g64 (engine fmt 5) over 65 columns, derived by hand. Group 0: w = [3, -3, 1.5, -1.5,
// 0.5, 2.5, 0...] -> s = 1 -> q = [3, -3, 2, -2, 0, 2, 0...] (half to even) -> codes q+4 =
// [7, 1, 6, 2, 4, 6, 4...]; low plane (code & 3) byte 0 = 3 | 1<<2 | 2<<4 | 2<<6 = 0xA7,
// byte 1 = 0 | 2<<2 = 0x08, the rest 0; high plane (code >> 2) byte 0 = 1,0,1,0,1,1,1,1 =
// 0xF5, the rest 0xFF. Group 1 holds one element, -2: s = 2/3 (f32), -2/s rounds to -3 ->
// code 1; its 63 missing elements store 4: low plane 0x01 then 0, high plane 0xFE then 0xFF.
TEST(Int3, TwoGroupsWithAShortTail) {
  std::vector<float> w(65, 0.0f);
  w[0] = 3;
  w[1] = -3;
  w[2] = 1.5f;
  w[3] = -1.5f;
  w[4] = 0.5f;
  w[5] = 2.5f;
  w[64] = -2;
  std::vector<std::uint8_t> packed(int3_row_bytes(65));
  std::vector<float> s(2);
  int3_encode_row(w, packed, s);
  ASSERT_EQ(packed.size(), 48u);
  std::vector<std::uint8_t> want(48, 0);
  want[0] = 0xA7;
  want[1] = 0x08;
  want[16] = 0xF5;
  for (int i = 17; i < 24; ++i) want[i] = 0xFF;
  want[24] = 0x01;
  want[40] = 0xFE;
  for (int i = 41; i < 48; ++i) want[i] = 0xFF;
  EXPECT_EQ(packed, want);
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 2.0f / 3.0f);
  std::vector<float> back(65);
  int3_decode_row(packed, s, back);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[2], 2.0f);
  EXPECT_EQ(back[4], 0.0f);
  EXPECT_EQ(back[64], -3.0f * (2.0f / 3.0f));
}

// Bits 2 under a grouped scheme: nibbles with qmax 1, clamp [-8, 1] (the converter's grouped
// branch). Groups of 2 over [1, -3.5 | 0.5, 3.5 | -1.25]: s = 3.5, 3.5, 1.25; q = [0, -1 | 0, 1 |
// -1] -> nibbles [8, 7 | 8, 9 | 7] -> bytes 0x78, 0x98, 0x07.
TEST(Int4, TwoBitGroupsUseQmaxOne) {
  const std::vector<float> w = {1.0f, -3.5f, 0.5f, 3.5f, -1.25f};
  std::vector<std::uint8_t> packed(3);
  std::vector<float> s(3);
  int4_encode_row(w, 2, packed, s, 1);
  EXPECT_EQ(packed, (std::vector<std::uint8_t>{0x78, 0x98, 0x07}));
  EXPECT_EQ(s, (std::vector<float>{3.5f, 3.5f, 1.25f}));
}

}  // namespace
}  // namespace qrepack
