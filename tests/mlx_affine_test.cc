// MLX affine sources (docs/formats/source-encodings.md): U32 codes with per-group scales and
// biases, bits and group size from config.json's quantization block. Hand-built checkpoints whose
// values are worked out here, mlx-lm's stacked switch_mlp experts, and the refusals. (Whole
// fixtures against an independent derivation: Families.DecodersAreBitExactAgainstAnIndependent
// Derivation.)
#include <gtest/gtest.h>

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
using testing::RawTensor;
using testing::recognition_error;
using testing::run_cli;
using testing::TempDir;

// One safetensors file of `tensors` and a config.json of `config` (none when null).
std::string write_checkpoint(const TempDir& d, const std::vector<RawTensor>& tensors,
                             const nlohmann::json& config) {
  const fs::path dir = d / "ck";
  fs::create_directories(dir);
  testing::write_raw_safetensors(dir / "model.safetensors", tensors);
  if (!config.is_null()) testing::write_text(dir / "config.json", config.dump());
  return dir.string();
}

nlohmann::json quantization(nlohmann::json block) { return {{"quantization", std::move(block)}}; }

TEST(MlxAffine, DecodesTheWorkedExamples) {
  // a: 4 bits, one group of 8. Word 0x76543210 holds codes 0..7, lowest column first; scale BF16
  // 0x3F00 = 0.5, bias 0xBF80 = -1: -1, -0.5, 0, ..., 2.5.
  // b (its own entry: 8 bits, groups of 4): bytes 00 01 80 FF = codes 0, 1, 128, 255; F16
  // scale 0x3400 = 0.25, bias 0x4000 = 2: 2, 2.25, 34, 65.75.
  // c (2 bits, one group of 16): word 0xE4E4E4E4 = codes 0 1 2 3 four times; F32 scale 3, bias
  // -0.5: -0.5, 2.5, 5.5, 8.5, ...
  TempDir d;
  const std::string dir =
      write_checkpoint(d,
                       {{"a.weight", "U32", {1, 1}, {0x10, 0x32, 0x54, 0x76}},
                        {"a.scales", "BF16", {1, 1}, {0x00, 0x3F}},
                        {"a.biases", "BF16", {1, 1}, {0x80, 0xBF}},
                        {"b.weight", "U32", {1, 1}, {0x00, 0x01, 0x80, 0xFF}},
                        {"b.scales", "F16", {1, 1}, {0x00, 0x34}},
                        {"b.biases", "F16", {1, 1}, {0x00, 0x40}},
                        {"c.weight", "U32", {1, 1}, {0xE4, 0xE4, 0xE4, 0xE4}},
                        {"c.scales", "F32", {1, 1}, {0x00, 0x00, 0x40, 0x40}},
                        {"c.biases", "F32", {1, 1}, {0x00, 0x00, 0x00, 0xBF}}},
                       quantization({{"group_size", 8},
                                     {"bits", 4},
                                     {"b", {{"group_size", 4}, {"bits", 8}}},
                                     {"c", {{"group_size", 16}, {"bits", 2}}}}));
  EXPECT_EQ(decode_weight(dir, "a.weight", "mlx-affine"),
            (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_EQ(decode_weight(dir, "b.weight", "mlx-affine"), (std::vector<float>{2, 2.25, 34, 65.75}));
  std::vector<float> c;
  for (int i = 0; i < 4; ++i) c.insert(c.end(), {-0.5f, 2.5f, 5.5f, 8.5f});
  EXPECT_EQ(decode_weight(dir, "c.weight", "mlx-affine"), c);
}

TEST(MlxAffine, OneMultiplyThenOneAddNotAFusedMultiplyAdd) {
  // s = 1 + 2^-23, q = 15, b = -15: s * q = 15 + 1.875 * 2^-20 exactly, which rounds to the
  // f32 15 + 2^-19 (the ulp at 15 is 2^-20); adding -15 gives 2^-19. A fused multiply-add would
  // give 15 * 2^-23 (1.78813934e-06) instead.
  TempDir d;
  const std::string dir = write_checkpoint(d,
                                           {{"a.weight", "U32", {1, 1}, {0xFF, 0xFF, 0xFF, 0xFF}},
                                            {"a.scales", "F32", {1, 1}, {0x01, 0x00, 0x80, 0x3F}},
                                            {"a.biases", "F32", {1, 1}, {0x00, 0x00, 0x70, 0xC1}}},
                                           quantization({{"group_size", 8}, {"bits", 4}}));
  const std::vector<float> got = decode_weight(dir, "a.weight", "mlx-affine");
  ASSERT_EQ(got.size(), 8u);
  for (float v : got) EXPECT_EQ(v, 0x1p-19f);
}

TEST(MlxAffine, StackedSwitchMlpExpertsReadTheirOwnScales) {
  // mlx-lm's [E, O, ..] stack: expert 1 of the same codes 0..7 with scale 2, bias 1 is 1, 3,
  // ..., 15 under the engine's per-expert name.
  TempDir d;
  const std::vector<std::uint8_t> word = {0x10, 0x32, 0x54, 0x76};
  std::vector<std::uint8_t> words = word;
  words.insert(words.end(), word.begin(), word.end());
  const std::string dir =
      write_checkpoint(d,
                       {{"model.layers.0.mlp.switch_mlp.up_proj.weight", "U32", {2, 1, 1}, words},
                        {"model.layers.0.mlp.switch_mlp.up_proj.scales",
                         "BF16",
                         {2, 1, 1},
                         {0x80, 0x3F, 0x00, 0x40}},
                        {"model.layers.0.mlp.switch_mlp.up_proj.biases",
                         "BF16",
                         {2, 1, 1},
                         {0x00, 0x00, 0x80, 0x3F}}},
                       quantization({{"group_size", 8}, {"bits", 4}}));
  EXPECT_EQ(decode_weight(dir, "model.layers.0.mlp.experts.0.up_proj.weight", "mlx-affine"),
            (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(decode_weight(dir, "model.layers.0.mlp.experts.1.up_proj.weight", "mlx-affine"),
            (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15}));
}

TEST(MlxAffine, WhatTheConfigDoesNotSayIsRefusedByName) {
  const std::vector<RawTensor> one = {{"a.weight", "U32", {1, 2}, std::vector<std::uint8_t>(8)},
                                      {"a.scales", "BF16", {1, 1}, {0x80, 0x3F}},
                                      {"a.biases", "BF16", {1, 1}, {0, 0}}};
  const auto refused = [&](const nlohmann::json& config, const std::string& words) {
    TempDir d;
    const std::string e = recognition_error(write_checkpoint(d, one, config));
    EXPECT_NE(e.find("'a.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("mlx_affine.config"), std::string::npos) << e;
    EXPECT_NE(e.find(words), std::string::npos) << e;
  };
  refused(nullptr, "does not guess");                                  // no config.json
  refused(nlohmann::json{{"model_type", "llama"}}, "does not guess");  // no block
  // GPTQ's block has bits and group_size too, but it is GPTQ's.
  refused(nlohmann::json{{"quantization_config",
                          {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}}}},
          "does not guess");
  refused(quantization({{"group_size", 16}, {"bits", 3}}), "bits 3");  // straddles words
  refused(quantization({{"group_size", 16}, {"bits", 4}, {"mode", "mxfp4"}}), "\"mxfp4\"");
  refused(quantization({{"group_size", 16}, {"bits", 4}, {"a", false}}), "unquantized");
  refused(quantization({{"group_size", 24}, {"bits", 4}}), "power-of-two group");
  refused(quantization({{"group_size", "16"}, {"bits", 4}}), "group_size");
}

TEST(MlxAffine, MisfitScalesAndBiasesAreRefusedNamingTheRule) {
  const nlohmann::json config = quantization({{"group_size", 8}, {"bits", 4}});
  const std::vector<std::uint8_t> words(8);
  for (const auto& [scales, biases] : std::vector<std::pair<RawTensor, RawTensor>>{
           // biases missing
           {{"a.scales", "BF16", {1, 2}, std::vector<std::uint8_t>(4)}, {"z", "BF16", {1}, {0, 0}}},
           // a grid for groups of 16
           {{"a.scales", "BF16", {1, 1}, {0, 0}}, {"a.biases", "BF16", {1, 1}, {0, 0}}},
           // scales and biases of two dtypes
           {{"a.scales", "BF16", {1, 2}, std::vector<std::uint8_t>(4)},
            {"a.biases", "F16", {1, 2}, std::vector<std::uint8_t>(4)}}}) {
    TempDir d;
    const std::string e = recognition_error(
        write_checkpoint(d, {{"a.weight", "U32", {1, 2}, words}, scales, biases}, config));
    EXPECT_NE(e.find("'a.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("mlx_affine.scale_shape"), std::string::npos) << e;
  }
}

TEST(MlxAffine, ANonFiniteScaleStopsTheRunWithNoOutput) {
  TempDir d;
  const std::string src = testing::write_fixture(d, "qwen3-moe", "mlx-affine");
  const std::string t = "model.layers.1.mlp.switch_mlp.down_proj.scales";
  testing::poke_tensor_byte(src, t, 6, 0xC0);  // BF16 0x7FC0: NaN
  testing::poke_tensor_byte(src, t, 7, 0x7F);
  const auto r = run_cli({"convert", src, "-o", src + "-x", "--to", "f32", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(t), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule mlx_affine.scale_valid"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(src + "-x"));
  const auto v = run_cli({"verify", src});
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_NE(v.err.find("rule mlx_affine.scale_valid"), std::string::npos) << v.err;
}

}  // namespace
}  // namespace qrepack
