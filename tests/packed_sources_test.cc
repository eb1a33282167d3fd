// The packed 4-bit and DeepSeek source encodings (docs/formats/source-encodings.md): MXFP4 in
// compressed-tensors and DeepSeek naming, compressed-tensors int4, FP8 with UE8M0 scales over
// 32x32 tiles or row groups of 32. Hand-built checkpoints whose values are worked out here;
// fixtures with one poked byte for the refusals. (The whole-fixture bit-exactness against an
// independent derivation is Families.DecodersAreBitExactAgainstAnIndependentDerivation.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/io/checkpoint.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::decode_weight;
using testing::poke_tensor_byte;
using testing::RawTensor;
using testing::recognition_error;
using testing::run_cli;
using testing::TempDir;
using testing::write_fixture;

// One safetensors file holding `tensors` in order, written by hand.
std::string write_checkpoint(const TempDir& d, const std::vector<RawTensor>& tensors) {
  const fs::path dir = d / "ck";
  fs::create_directories(dir);
  testing::write_raw_safetensors(dir / "model.safetensors", tensors);
  return dir.string();
}

TEST(PackedSources, Int4CtDecodesTheWorkedExample) {
  // Word 0x0F8A7780 holds nibbles 0 8 7 7 A 8 F 0 (lowest column first); scale BF16 0x3E00 =
  // 0.125: -1, 0, -0.125, -0.125, 0.25, 0, 0.875, -1. Row 1: the same word, scale 2.0 (0x4000).
  TempDir d;
  const std::vector<std::uint8_t> words = {0x80, 0x77, 0x8A, 0x0F, 0x80, 0x77, 0x8A, 0x0F};
  const std::string dir =
      write_checkpoint(d, {{"a.weight_packed", "I32", {2, 1}, words},
                           {"a.weight_scale", "BF16", {2, 1}, {0x00, 0x3E, 0x00, 0x40}},
                           {"a.weight_shape", "I32", {2}, {2, 0, 0, 0, 8, 0, 0, 0}}});
  const std::vector<float> want = {-1,  0, -0.125, -0.125, 0.25, 0, 0.875, -1,
                                   -16, 0, -2,     -2,     4,    0, 14,    -16};
  EXPECT_EQ(decode_weight(dir, "a.weight"), want);
}

TEST(PackedSources, Mxfp4DeepseekNamingDecodesPerRowGroup) {
  // I8 pairs [1, 16] = 32 inputs, F8_E8M0 exponent 0x80 (2^1): bytes D7 14 -> 12, -6, 4, 1.
  TempDir d;
  std::vector<std::uint8_t> packed(16, 0);
  packed[0] = 0xD7;
  packed[1] = 0x14;
  const std::string dir =
      write_checkpoint(d, {{"ffn.experts.0.w1.weight", "I8", {1, 16}, packed},
                           {"ffn.experts.0.w1.scale", "F8_E8M0", {1, 1}, {0x80}}});
  const std::vector<float> got = decode_weight(dir, "ffn.experts.0.w1.weight");
  ASSERT_EQ(got.size(), 32u);
  EXPECT_EQ(got[0], 12.0f);
  EXPECT_EQ(got[1], -6.0f);
  EXPECT_EQ(got[2], 4.0f);
  EXPECT_EQ(got[3], 1.0f);
}

TEST(PackedSources, Fp8ScaleGridIsTheOneTheScaleShapeNames) {
  // [2, 64] E4M3 codes 0x38 (1.0) everywhere; ".scale" [2, 2] can only be row groups of 32
  // (32x32 tiles would be [1, 2], 128x128 blocks [1, 1]): row r, group g scaled by 2^(r+2g).
  TempDir d;
  const std::string dir = write_checkpoint(
      d, {{"embed.weight", "F8_E4M3", {2, 64}, std::vector<std::uint8_t>(128, 0x38)},
          {"embed.scale", "F8_E8M0", {2, 2}, {127, 129, 128, 130}}});
  const std::vector<float> got = decode_weight(dir, "embed.weight");
  ASSERT_EQ(got.size(), 128u);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 64; ++c) {
      EXPECT_EQ(got[r * 64 + c], std::ldexp(1.0f, r + 2 * (c / 32))) << r << " " << c;
    }
  }
  // The same scale shape over a [64, 64] weight is 32x32 tiles.
  const std::string tiles = write_checkpoint(
      d, {{"wkv.weight", "F8_E4M3", {64, 64}, std::vector<std::uint8_t>(64 * 64, 0x38)},
          {"wkv.scale", "F8_E8M0", {2, 2}, {127, 129, 128, 130}}});
  const std::vector<float> t = decode_weight(tiles, "wkv.weight");
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[40], 4.0f);            // row 0, tile column 1
  EXPECT_EQ(t[33 * 64 + 1], 2.0f);   // tile row 1, column 0
  EXPECT_EQ(t[63 * 64 + 63], 8.0f);  // tile [1, 1]
}

TEST(PackedSources, MisfitSidecarsAreRefusedNamingTheRule) {
  TempDir d1, d2, d3, d4;
  // A scale grid that is none of the three.
  std::string e = recognition_error(
      write_checkpoint(d1, {{"w.weight", "F8_E4M3", {64, 64}, std::vector<std::uint8_t>(4096)},
                            {"w.scale", "F8_E8M0", {3, 3}, std::vector<std::uint8_t>(9, 127)}}));
  EXPECT_NE(e.find("fp8_block.scale_shape"), std::string::npos) << e;
  EXPECT_NE(e.find("w.scale"), std::string::npos) << e;
  // MXFP4 exponents for 16 inputs per group instead of 32.
  e = recognition_error(
      write_checkpoint(d2, {{"x.weight_packed", "U8", {1, 16}, std::vector<std::uint8_t>(16)},
                            {"x.weight_scale", "U8", {1, 2}, {127, 127}}}));
  EXPECT_NE(e.find("mxfp4.scale_shape"), std::string::npos) << e;
  // Asymmetric compressed-tensors int4.
  e = recognition_error(
      write_checkpoint(d3, {{"y.weight_packed", "I32", {1, 4}, std::vector<std::uint8_t>(16)},
                            {"y.weight_scale", "BF16", {1, 1}, {0x80, 0x3F}},
                            {"y.weight_zero_point", "I32", {1, 1}, std::vector<std::uint8_t>(4)}}));
  EXPECT_NE(e.find("int4_ct.symmetric"), std::string::npos) << e;
  // FP4 pairs in I8 with a scale that is not E8M0.
  e = recognition_error(
      write_checkpoint(d4, {{"z.weight", "I8", {1, 16}, std::vector<std::uint8_t>(16)},
                            {"z.scale", "F32", {1, 1}, {0, 0, 0x80, 0x3F}}}));
  EXPECT_NE(e.find("mxfp4.scale_shape"), std::string::npos) << e;
}

// A converted fixture must not exist after a refusal; the message names tensor and rule.
void expect_refused(const std::string& src, const std::string& tensor, const std::string& rule) {
  const auto r = run_cli({"convert", src, "-o", src + "-x", "--to", "f32", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(tensor), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(src + "-x"));
  // verify SRC alone decodes every weight and finds the same thing.
  const auto v = run_cli({"verify", src});
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_NE(v.err.find("rule " + rule), std::string::npos) << v.err;
}

TEST(PackedSources, VerifyWithoutAnOutputDecodesEverySourceWeight) {
  TempDir d;
  const std::string src = write_fixture(d, "deepseek-v3", "mxfp4-deepseek");
  const auto v = run_cli({"verify", src});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find(" mxfp4"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("every scale and value is finite"), std::string::npos) << v.out;
}

TEST(PackedSources, BadScalesInFixturesStopTheRunWithNoOutput) {
  TempDir d;
  const std::string mx = write_fixture(d, "llama", "mxfp4");
  poke_tensor_byte(mx, "model.layers.1.mlp.down_proj.weight_scale", 3, 0xFF);
  expect_refused(mx, "model.layers.1.mlp.down_proj.weight_scale", "mxfp4.scale_valid");
  const std::string ds = write_fixture(d, "llama", "mxfp4-deepseek");
  poke_tensor_byte(ds, "model.layers.0.mlp.up_proj.scale", 0, 0xFF);
  expect_refused(ds, "model.layers.0.mlp.up_proj.scale", "mxfp4.scale_valid");
  const std::string ct = write_fixture(d, "llama", "int4-ct");
  poke_tensor_byte(ct, "model.layers.0.mlp.gate_proj.weight_scale", 1, 0xBF);  // negative
  expect_refused(ct, "model.layers.0.mlp.gate_proj.weight_scale", "int4_ct.scale_valid");
  const std::string shape = write_fixture(d, "qwen3", "int4-ct");
  poke_tensor_byte(shape, "model.layers.0.self_attn.o_proj.weight_shape", 4, 7);  // I = 7
  expect_refused(shape, "model.layers.0.self_attn.o_proj.weight_shape",
                 "compressed_tensors.weight_shape");
}

// Every other row of an interleaved fused tensor (Inkling's w13: gate rows even, up rows odd),
// read in spans of up to 1 MiB: 2048 raw rows of 2 KiB, the odd ones from logical row 3 on,
// cross several spans and end on a partial one. Each raw row holds its own index.
TEST(PackedSources, StridedRowsAcrossSpansAreTheRowsAsked) {
  constexpr std::uint64_t kRaw = 2048, kCols = 1024;
  RawTensor t{"model.layers.0.mlp.w13.weight", "BF16", {kRaw, kCols}, {}};
  for (std::uint64_t r = 0; r < kRaw; ++r) {
    for (std::uint64_t c = 0; c < kCols; ++c) {
      t.bytes.push_back(static_cast<std::uint8_t>(r));
      t.bytes.push_back(static_cast<std::uint8_t>(r >> 8));
    }
  }
  TempDir d;
  const std::string dir = write_checkpoint(d, {t});
  auto ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  auto rec = recognize_weights(*ck, nullptr);
  ASSERT_TRUE(rec.ok()) << rec.error().message();
  ASSERT_EQ(rec->weights.size(), 1u);
  LogicalWeight up = rec->weights[0];
  const std::array<std::uint64_t, 2> shape{kRaw / 2, kCols};
  up.shape = WeightShape(shape);
  up.row0 = 1;
  up.row_stride = 2;
  WeightReader r(*ck, 128, 128);
  ASSERT_TRUE(r.open(up).ok());
  constexpr std::uint64_t kFirst = 3, kCount = kRaw / 2 - kFirst;
  std::vector<std::uint8_t> out(kCount * kCols * 2);
  const Status st = r.read_raw_rows(kFirst, kCount, out);
  ASSERT_TRUE(st.ok()) << st.error().message();
  for (std::uint64_t i = 0; i < kCount; ++i) {
    const std::uint64_t raw = 1 + 2 * (kFirst + i);
    for (std::uint64_t c = 0; c < kCols; c += 511) {
      const std::uint64_t at = (i * kCols + c) * 2;
      ASSERT_EQ(out[at] | (out[at + 1] << 8), static_cast<int>(raw)) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace qrepack
