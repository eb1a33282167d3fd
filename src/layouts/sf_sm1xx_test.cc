#include "qrepack/layouts/sf_sm1xx.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace qrepack {
namespace {

// reference/formats.md §3.2, worked offsets for V = 16, R = 300, K = 1040 (verified there
// against CuTe): Kb = 65 scale columns.
TEST(SfSm1xx, WorkedOffsetsOfReferenceFormats32) {
  struct Row {
    std::uint64_t r, k, offset;
  };
  const Row rows[] = {{0, 0, 0},       {0, 15, 0},        {0, 16, 1},     {0, 48, 3},
                      {0, 64, 512},    {1, 0, 16},        {31, 0, 496},   {32, 0, 4},
                      {33, 16, 21},    {96, 0, 12},       {127, 63, 511}, {128, 0, 8704},
                      {129, 64, 9232}, {299, 1039, 25780}};
  for (const Row& x : rows) {
    EXPECT_EQ(sf_sm1xx_offset(x.r, x.k / 16, 65), x.offset) << x.r << "," << x.k;
  }
  EXPECT_EQ(sf_sm1xx_size(300, 1040), 26112u);
}

TEST(SfSm1xx, SizesFromTheFlashRtReference) {
  EXPECT_EQ(sf_sm1xx_size(968, 2048), 131072u);             // 1024 * 128
  EXPECT_EQ(sf_sm1xx_size(2048, 1024), 2048u * 1024 / 16);  // no padding for pi05 weights
  EXPECT_EQ(sf_sm1xx_size(1, 16), 128u * 4);
}

TEST(SfSm1xx, EveryRealEntryHasItsOwnByteInsideTheBuffer) {
  const std::uint64_t rows = 130, k = 80, kb = 5;
  std::set<std::uint64_t> seen;
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t b = 0; b < kb; ++b) {
      const auto off = sf_sm1xx_offset(r, b, kb);
      EXPECT_LT(off, sf_sm1xx_size(rows, k));
      EXPECT_TRUE(seen.insert(off).second) << r << "," << b;
    }
  }
}

}  // namespace
}  // namespace qrepack
