// colibri-qwen38-int4 end to end: both Qwen3.8-Flash-Next releases (BF16 fused experts and the
// official FP8 with BF16 block scales) convert with --target into the fork's experts-only overlay,
// every byte equal to an independent numpy derivation (tests/python/qwen38_int4.py), check-load
// passes as the runtime's overlay loader checks, and bad input stops the run before any output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;
using testing::write_fixture;

TEST(Qwen38, BothReleasesConvertToTheOverlayAsDerived) {
  TempDir d;
  for (const char* kind : {"qwen38", "qwen38-fp8"}) {
    for (const char* group : {"64", "32"}) {
      const std::string src = write_fixture(d, kind);
      const std::string out = (d / fmt::format("{}-g{}", kind, group)).string();
      const auto r = run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", out, "--to",
                              fmt::format("int4-g{}", group)});
      ASSERT_EQ(r.exit_code, 0) << kind << ": " << r.err;
      EXPECT_NE(r.out.find("PLAN: target colibri-qwen38-int4"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable (8 checked)"), std::string::npos)
          << r.out;
      EXPECT_EQ(run_test_python("qwen38_int4.py", {src, out, group}), 0) << kind << " " << group;
      // Only the overlay: no config, tokenizer or dense tensor is copied.
      EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
      EXPECT_FALSE(fs::exists(fs::path(out) / "tokenizer.json"));
      const auto meta = read_json(fs::path(out) / "qwen38_meta.json");
      EXPECT_EQ(meta["expert_gs"], std::stoi(group));
      EXPECT_EQ(meta["moe_units"], 3);
      EXPECT_EQ(meta["bytes_per_expert"], 3 * 64 * 192 / 2 + 4 * 3 * 64 * 192 / std::stoi(group));
      // convert_qwen38_int4.py's own words, byte for byte.
      EXPECT_EQ(meta["contains"],
                "routed experts only; dense, PLE, vision and tokenizer stay in the FP8 "
                "checkpoint, mounted alongside via st_init_multi");
      EXPECT_EQ(run_cli({"check-load", out}).exit_code, 0);
    }
  }
}

TEST(Qwen38, OutputDoesNotDependOnThreads) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen38-fp8");
  const std::string a = (d / "a").string(), b = (d / "b").string();
  ASSERT_EQ(run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", a, "--threads", "1"})
                .exit_code,
            0);
  ASSERT_EQ(run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", b, "--threads", "2",
                     "--job-size", "4kB"})
                .exit_code,
            0);
  for (const char* f : {"model-00000.safetensors", "model-00001.safetensors",
                        "model-mtp00.safetensors", "qwen38_meta.json"}) {
    EXPECT_EQ(testing::read_bytes(fs::path(a) / f), testing::read_bytes(fs::path(b) / f)) << f;
  }
}

// Each refusal: exit 2, one line naming the file or tensor and the rule, no output directory.
TEST(Qwen38, BadInputIsRefusedBeforeAnyOutput) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen38");
  const fs::path cfg = fs::path(src) / "config.json";
  const std::vector<std::uint8_t> saved = testing::read_bytes(cfg);
  struct Case {
    const char* key;
    int value;
    const char* expect;
  };
  for (const Case& c : {Case{"num_experts", 5, "missing model.language_model.layers.0.mlp.experts"},
                        Case{"moe_intermediate_size", 128, "the config implies"},
                        Case{"num_hidden_layers", 3, "layer 2 has no routed experts"},
                        Case{"hidden_size", 160, "rule qwen38.group"}}) {
    auto j = read_json(cfg);
    j["text_config"][c.key] = c.value;
    testing::write_text(cfg, j.dump(2));
    const auto r =
        run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", (d / "x").string()});
    EXPECT_EQ(r.exit_code, 2) << c.key << ": " << r.out;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.key << ": " << r.err;
    EXPECT_FALSE(fs::exists(d / "x")) << c.key;
    testing::write_bytes(cfg, saved);
  }
  // 192 columns are not whole groups of 128: the runtime could not read the scales.
  auto g = run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", (d / "x").string(),
                    "--to", "int4-g128"});
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.err.find("rule qwen38.group"), std::string::npos) << g.err;
  g = run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", (d / "x").string(), "--to",
               "int8-row"});
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.err.find("rule target.scheme"), std::string::npos) << g.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

TEST(Qwen38, AnUnknownNameStopsTheRun) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen38");
  const std::string bad = (d / "bad").string();
  ASSERT_EQ(run_cli({"reshard", src, "-o", bad}).exit_code, 0);
  const std::string header =
      R"({"model.language_model.layers.0.mlp.brand_new.weight":{"dtype":"F32","shape":[2],)"
      R"("data_offsets":[0,8]}})";
  std::vector<std::uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(header.size() >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + 8, 0);
  testing::write_bytes(fs::path(bad) / "zz-extra.safetensors", bytes);
  fs::remove(fs::path(bad) / "model.safetensors.index.json");
  const auto r =
      run_cli({"convert", bad, "--target", "colibri-qwen38-int4", "-o", (d / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("model.language_model.layers.0.mlp.brand_new.weight"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d / "out"));
}

// The overlay's loader derives the group size from the scales' bytes: a truncated qs fails.
TEST(Qwen38, CheckLoadCatchesWhatTheOverlayLoaderRefuses) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen38");
  const std::string out = (d / "out").string();
  ASSERT_EQ(run_cli({"convert", src, "--target", "colibri-qwen38-int4", "-o", out}).exit_code, 0);
  auto meta = read_json(fs::path(out) / "qwen38_meta.json");
  meta["moe_intermediate_size"] = 128;  // the scales now imply a group of 128 columns
  testing::write_text(fs::path(out) / "qwen38_meta.json", meta.dump());
  const auto r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("mlp.experts.0.qs"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qrepack
