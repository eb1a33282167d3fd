#include "omega/flashrt_emulate.h"

#include <gtest/gtest.h>

#include <vector>

namespace qrepack {
namespace {

TEST(FlashrtEmulate, Ue4m3RoundLacksTheFactorEight) {
  // The worked numbers: normal scales are only 2^e or 1.125 * 2^e.
  EXPECT_EQ(flashrt_ue4m3_round(1.9f), 1.125f);   // the kernel's UE4M3: 1.875
  EXPECT_EQ(flashrt_ue4m3_round(100.0f), 72.0f);  // the kernel's UE4M3: 96
  EXPECT_EQ(flashrt_ue4m3_round(1.5f), 1.0f);     // m = rint_even(0.5) = 0
  EXPECT_EQ(flashrt_ue4m3_round(1.56f), 1.125f);
  EXPECT_EQ(flashrt_ue4m3_round(1000.0f), 480.0f);  // clamp 480, not 448
  // Subnormal range: steps of 2^-9, rint half-even.
  EXPECT_EQ(flashrt_ue4m3_round(0.0029296875f), 0.00390625f);  // 1.5 * 2^-9 -> 2 * 2^-9
  EXPECT_EQ(flashrt_ue4m3_round(0.0f), 0.0f);                  // 1e-12 rounds to 0
}

TEST(FlashrtEmulate, BlocksUseTheFloorAndADivision) {
  std::vector<float> v(32, 0.0f);
  v[0] = 7.0f;   // amax 7 -> scale 1
  v[1] = -3.4f;  // -> -3
  v[2] = 0.5f;   // rint_even(0.5) = 0
  v[3] = 1.5f;   // -> 2
  // Second block all zero: scale 0 floored to 2^-9, values stay 0.
  const auto out = flashrt_e0m3_emulate(v, 2, 16);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 2.0f);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(out[i], 0.0f);
  // amax 13.3 / 7 = 1.9 -> scale 1.125 (not 1.875): 13.3 / 1.125 = 11.8 clamps to 7.
  std::vector<float> w(16, 0.0f);
  w[0] = 13.3f;
  w[1] = 4.0f;
  const auto q = flashrt_e0m3_emulate(w, 1, 16);
  EXPECT_EQ(q[0], 7.0f * 1.125f);
  EXPECT_EQ(q[1], 4.0f * 1.125f);  // rint(3.56) = 4
}

}  // namespace
}  // namespace qrepack
