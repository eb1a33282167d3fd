// colibri-qwen38-experts-int4g64 end to end: both Qwen3.8-Flash-Next releases (BF16 fused
// experts and the official FP8 with BF16 block scales) convert by default into the runtime's
// experts-int4g64/ sidecar, every byte of the layer files and index.json equal to an independent
// numpy derivation (tests/python/qwen38_sidecar.py); check-load follows the runtime's loader;
// bad input stops the run before any output.
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

TEST(Qwen38Sidecar, BothReleasesConvertByDefaultAsDerived) {
  TempDir d;
  for (const char* kind : {"qwen38", "qwen38-fp8"}) {
    const std::string src = write_fixture(d, kind);
    const std::string out = (d / (std::string(kind) + "-sidecar")).string();
    const auto r = run_cli({"convert", src, "-o", out});
    ASSERT_EQ(r.exit_code, 0) << kind << ": " << r.err;
    EXPECT_NE(r.out.find("PLAN: target colibri-qwen38-experts-int4g64"), std::string::npos)
        << r.out;
    // 2 layers x 4 experts, each one record of six tensors.
    EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable (8 checked)"), std::string::npos)
        << r.out;
    EXPECT_EQ(run_test_python("qwen38_sidecar.py", {src, out}), 0) << kind;
    const auto index = read_json(fs::path(out) / "index.json");
    EXPECT_EQ(index["complete"], true);
    EXPECT_EQ(index["record_bytes"], 3 * 64 * 96 + 4 * 3 * 64 * 3);  // codes, then f32 scales
    // Only the sidecar: the MTP head's experts and everything else stay in the snapshot.
    EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
    EXPECT_EQ(fs::file_size(fs::path(out) / "layer-000.safetensors") % 4, 0u);
  }
}

TEST(Qwen38Sidecar, BadInputIsRefusedBeforeAnyOutput) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen38-fp8");
  const fs::path cfg = fs::path(src) / "config.json";
  const std::vector<std::uint8_t> saved = testing::read_bytes(cfg);
  const auto refused = [&](const std::vector<std::string>& extra, const std::string& rule,
                           const std::string& words) {
    std::vector<std::string> args{"convert", src, "-o", (d / "x").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d / "x"));
  };
  refused({"--to", "int4-g32"}, "target.scheme", "int4-g64 experts only");
  auto j = read_json(cfg);
  j["text_config"]["model_type"] = "qwen3_5_moe_text";
  testing::write_text(cfg, j.dump(2));
  refused({}, "qwen38.sidecar", "qwen4_exp_text");
  j = read_json(cfg);
  j["text_config"]["model_type"] = "qwen4_exp_text";
  j["text_config"]["hidden_size"] = 63;
  j["text_config"]["moe_intermediate_size"] = 1;
  testing::write_text(cfg, j.dump(2));
  refused({}, "qwen38.sidecar", "not a multiple of 4");
  j["text_config"]["hidden_size"] = 192;
  j["text_config"]["moe_intermediate_size"] = 128;
  testing::write_text(cfg, j.dump(2));
  refused({}, "target.unknown_tensor", "the config implies [128, 192]");
  testing::write_bytes(cfg, saved);
}

TEST(Qwen38Sidecar, CheckLoadCatchesWhatTheLoaderRefuses) {
  TempDir d;
  const std::string out = (d / "out").string();
  ASSERT_EQ(run_cli({"convert", write_fixture(d, "qwen38"), "-o", out}).exit_code, 0);
  const fs::path index = fs::path(out) / "index.json";
  const auto saved = testing::read_bytes(index);
  auto j = read_json(index);
  j["complete"] = false;  // the runtime keeps the FP8 experts
  testing::write_text(index, j.dump(1));
  auto r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("not complete"), std::string::npos) << r.out;
  testing::write_bytes(index, saved);
  j = read_json(index);
  j["record_bytes"] = 1024;
  testing::write_text(index, j.dump(1));
  r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("record_bytes"), std::string::npos) << r.out;
  testing::write_bytes(index, saved);
  EXPECT_EQ(run_cli({"check-load", out}).exit_code, 0);
}

}  // namespace
}  // namespace qrepack
