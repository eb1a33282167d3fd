#include "qrepack/checkpoint/layout_family.h"

#include <gtest/gtest.h>

namespace qrepack {
namespace {

TEST(LayoutFamily, Fp8BlockWithEdgeBlocksIs128x128) {
  // O=300, I=200 -> scale [3, 2] (reference/formats.md §6 example); 3 and 2 alone would allow
  // any block in [100, 149] x [100, 199]; a second weight pins it further.
  const std::vector<TensorSpec> t = {
      {"a.weight", Dtype::kF8E4M3, {300, 200}},  {"a.weight_scale_inv", Dtype::kF32, {3, 2}},
      {"b.weight", Dtype::kF8E4M3, {1024, 129}}, {"b.weight_scale_inv", Dtype::kF32, {8, 2}},
      {"norm.weight", Dtype::kBF16, {200}},
  };
  const auto r = recognize_layout(t);
  EXPECT_EQ(r.family, LayoutFamily::kFp8Block);
  EXPECT_EQ(r.description, "FP8 E4M3, 128x128 block scales");
  EXPECT_EQ(r.fp8_tensors, 2u);
  EXPECT_EQ(r.scale_sidecars, 2u);
  EXPECT_EQ(r.other_tensors, 1u);
}

TEST(LayoutFamily, DerivesOtherBlockSizesFromShapes) {
  const std::vector<TensorSpec> t = {
      {"a.weight", Dtype::kF8E4M3, {256, 256}},
      {"a.weight_scale_inv", Dtype::kF32, {4, 4}},  // 64x64 blocks exactly
  };
  const auto r = recognize_layout(t);
  ASSERT_TRUE(r.block.has_value());
  EXPECT_EQ(r.block->rows, 64u);
  EXPECT_EQ(r.block->cols, 64u);
}

TEST(LayoutFamily, FusedExpertScalesAreThreeDimensional) {
  const std::vector<TensorSpec> t = {
      {"e.gate_up_proj", Dtype::kF8E4M3, {8, 64, 130}},
      {"e.gate_up_proj_scale_inv", Dtype::kF32, {8, 1, 2}},
  };
  EXPECT_EQ(recognize_layout(t).family, LayoutFamily::kFp8Block);
}

TEST(LayoutFamily, MissingOrMisshapenScalesAreUnknownWithNotes) {
  const std::vector<TensorSpec> missing = {{"a.weight", Dtype::kF8E4M3, {128, 128}}};
  auto r = recognize_layout(missing);
  EXPECT_EQ(r.family, LayoutFamily::kUnknown);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("a.weight_scale_inv"), std::string::npos);

  const std::vector<TensorSpec> wrong = {{"a.weight", Dtype::kF8E4M3, {256, 256}},
                                         {"a.weight_scale_inv", Dtype::kF32, {3, 2}},
                                         {"b.weight", Dtype::kF8E4M3, {256, 256}},
                                         {"b.weight_scale_inv", Dtype::kF32, {2, 2}}};
  EXPECT_EQ(recognize_layout(wrong).family, LayoutFamily::kUnknown);  // 3 vs 2 rows disagree
}

TEST(LayoutFamily, PlainFloatAndPackedAndEmpty) {
  const std::vector<TensorSpec> plain = {
      {"w", Dtype::kBF16, {4, 4}}, {"b", Dtype::kF32, {4}}, {"pos", Dtype::kI64, {4}}};
  auto r = recognize_layout(plain);
  EXPECT_EQ(r.family, LayoutFamily::kPlainFloat);
  EXPECT_EQ(r.description, "plain floating point (BF16+F32+I64)");
  const std::vector<TensorSpec> packed = {{"w", Dtype::kU8, {8}}, {"w.qs", Dtype::kF32, {1}}};
  EXPECT_EQ(recognize_layout(packed).family, LayoutFamily::kUnknown);
  EXPECT_EQ(recognize_layout(std::span<const TensorSpec>{}).family, LayoutFamily::kEmpty);
}

TEST(LayoutFamily, BlockRangeFollowsCeilDivision) {
  const std::uint64_t w[] = {300, 200};
  const std::uint64_t s[] = {3, 2};
  const auto r = block_range(w, s).value();
  EXPECT_EQ(r.rows_lo, 100u);  // ceil(300/3)
  EXPECT_EQ(r.rows_hi, 149u);  // floor(299/2)
  EXPECT_EQ(r.cols_lo, 100u);
  EXPECT_EQ(r.cols_hi, 199u);
  const std::uint64_t bad[] = {3, 300};
  EXPECT_FALSE(block_range(w, bad).has_value());  // 300 scale columns for 200 inputs
}

}  // namespace
}  // namespace qrepack
