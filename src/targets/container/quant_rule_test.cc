// The container targets' quantizer on worked examples derived by hand from the upstream
// converters' torch / numpy formulas (reference/colibri-engines.md §1.4, §1.7, §1.9).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "qrepack/targets/container.h"

namespace qrepack {
namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// amax 7 gives scale exactly 1.0 at 4 bits: codes are x rounded half to even.
TEST(QuantRule, RoundsHalfToEvenAfterAnF32Division) {
  const std::array<float, 8> x = {7.0f, 0.5f, 1.5f, 2.5f, -2.5f, 3.5f, -0.5f, 6.5f};
  std::array<std::int8_t, 8> q{};
  float s = 0;
  QuantRule r;
  quantize_rows(x.data(), 1, 8, r, q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q, (std::array<std::int8_t, 8>{7, 0, 2, 2, -2, 4, 0, 6}));
}

// An all-zero group: the floor 1e-12 / qmax (OLMoE, Qwen3.6), or 1.0 (dense Qwen3).
TEST(QuantRule, AllZeroGroupScale) {
  const std::array<float, 4> x = {0, 0, 0, 0};
  std::array<std::int8_t, 4> q{};
  float s = 0;
  QuantRule r;
  r.bits = 8;
  quantize_rows(x.data(), 1, 4, r, q.data(), &s);
  EXPECT_EQ(bits_of(s), 0x280dd87du);  // f32(f32(1e-12) / 127) = 7.874016e-15
  r.bits = 4;
  r.zero_group_scale_one = true;
  r.amax_floor = 0;
  quantize_rows(x.data(), 1, 4, r, q.data(), &s);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q, (std::array<std::int8_t, 4>{0, 0, 0, 0}));
}

// Groups of 2 over 5 columns: the last group is partial and has its own scale.
TEST(QuantRule, GroupsIncludingAPartialLastOne) {
  const std::array<float, 5> x = {1.0f, -7.0f, 14.0f, 2.0f, -0.7f};
  std::array<std::int8_t, 5> q{};
  std::array<float, 3> s{};
  QuantRule r;
  r.group = 2;
  quantize_rows(x.data(), 1, 5, r, q.data(), s.data());
  EXPECT_EQ(s, (std::array<float, 3>{1.0f, 2.0f, 0.1f}));
  EXPECT_EQ(q, (std::array<std::int8_t, 5>{1, -7, 7, 1, -7}));
}

TEST(QuantRule, NibbleConventions) {
  const std::array<std::int8_t, 3> q = {-1, 2, 1};
  std::array<std::uint8_t, 2> out{};
  QuantRule twos;
  twos.nibbles = Nibbles::kTwosComplement;
  pack_codes(q.data(), 3, twos, out.data());
  EXPECT_EQ(out, (std::array<std::uint8_t, 2>{0x2F, 0x01}));  // the odd tail pads code 0
  QuantRule offset;
  pack_codes(q.data(), 3, offset, out.data());
  EXPECT_EQ(out, (std::array<std::uint8_t, 2>{0xA7, 0x89}));  // q + 8; pad nibble 8
  QuantRule eight;
  eight.bits = 8;
  std::array<std::uint8_t, 3> bytes{};
  pack_codes(q.data(), 3, eight, bytes.data());
  EXPECT_EQ(bytes, (std::array<std::uint8_t, 3>{0xFF, 0x02, 0x01}));
}

TEST(QuantRule, CodeBytes) {
  QuantRule flat;
  EXPECT_EQ(code_bytes(3, 5, flat), 8u);  // 15 codes packed as one run
  QuantRule rows;
  rows.byte_rows = true;
  EXPECT_EQ(code_bytes(3, 5, rows), 9u);  // each row padded to whole bytes
  QuantRule eight;
  eight.bits = 8;
  EXPECT_EQ(code_bytes(3, 5, eight), 15u);
}

// Qwen3.8's planar64-v8: a row of 67 codes is one 64-block (byte k = code k | code k + 32 <<
// 4, offset binary) and a tail of 3 in pairs (64 | 65 << 4, then 66 with the pad nibble 8).
TEST(QuantRule, Planar64PairsEachBlocksHalvesAndPacksTheTailInPairs) {
  std::array<std::int8_t, 67> q{};
  for (int i = 0; i < 67; ++i) q[i] = static_cast<std::int8_t>(i % 16 - 8);
  QuantRule r;
  r.byte_rows = r.planar64 = true;
  std::array<std::uint8_t, 34> out{};
  pack_codes_planar64(q.data(), 67, r, out.data());
  EXPECT_EQ(out[0], 0x00);   // code 0 (-8 -> 0) | code 32 (-8 -> 0) << 4
  EXPECT_EQ(out[1], 0x11);   // codes 1 and 33: -7 -> 1
  EXPECT_EQ(out[15], 0xFF);  // codes 15 and 47: 7 -> 15
  EXPECT_EQ(out[16], 0x00);  // codes 16 and 48
  EXPECT_EQ(out[32], 0x10);  // codes 64 (0) and 65 (1)
  EXPECT_EQ(out[33], 0x82);  // code 66 (2), pad nibble 8
}

// kimi_k3.c / k3_repack.py multiply by the f32 reciprocal: amax 889 gives scale 7 exactly, and
// -885.5 / 7 = -126.5 rounds to -126 while -885.5 * f32(1/7) = -126.50000x rounds to -127.
TEST(QuantRule, ReciprocalMultipliesByTheF32Inverse) {
  const std::array<float, 2> x = {889.0f, -885.5f};
  std::array<std::int8_t, 2> q{};
  float s = 0;
  QuantRule r;
  r.bits = 8;
  r.amax_floor = 0.0f;
  r.scale_floor = 1e-20f;
  r.symmetric = true;
  quantize_rows(x.data(), 1, 2, r, q.data(), &s);
  EXPECT_EQ(s, 7.0f);
  EXPECT_EQ(q[1], -126);
  r.reciprocal = true;
  quantize_rows(x.data(), 1, 2, r, q.data(), &s);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
}

}  // namespace
}  // namespace qrepack
