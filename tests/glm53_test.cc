// colibri-glm53 end to end: the GLM-5.3-Flash fixture (FP8 experts, KDA / MLA layers, mHC,
// MTP, vision) converts by default into the glm53.c container, every output file equal to an
// independent numpy derivation (tests/python/glm53.py), check-load passes as glm53.c loads,
// and what the runtime cannot take is refused before any output — a GLM-5.3-Flash checkpoint
// given to the GLM-5.2 runtime's target above all (upstream #1368).
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

std::string make(const TempDir& d) { return testing::write_fixture(d, "glm53"); }

TEST(Glm53, ConvertsByDefaultAsDerivedAndLoads) {
  TempDir d;
  const std::string src = make(d);
  const std::string out = (d / "out").string();
  const auto r = run_cli({"convert", src, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("PLAN: target colibri-glm53"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("routed experts int4-g64                      48"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  EXPECT_EQ(run_test_python("glm53.py", {src, out}), 0);
  // Side files: copied as they are, generation_config.json written from the eos id.
  EXPECT_EQ(testing::read_bytes(fs::path(src) / "config.json"),
            testing::read_bytes(fs::path(out) / "config.json"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "chat_template.jinja"));
  EXPECT_EQ(read_json(fs::path(out) / "generation_config.json")["eos_token_id"],
            nlohmann::json::array({1}));
  EXPECT_EQ(read_json(fs::path(out) / "qrepack.json")["target"]["name"], "colibri-glm53");
  EXPECT_EQ(run_cli({"check-load", out}).exit_code, 0);
}

TEST(Glm53, OutputDoesNotDependOnThreads) {
  TempDir d;
  const std::string src = make(d);
  const std::string a = (d / "a").string(), b = (d / "b").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", a, "--threads", "1"}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", src, "-o", b, "--threads", "2", "--job-size", "4kB"}).exit_code, 0);
  for (const auto& e : fs::directory_iterator(a)) {
    const std::string f = e.path().filename().string();
    if (f == "qrepack.json") continue;
    EXPECT_EQ(testing::read_bytes(e.path()), testing::read_bytes(fs::path(b) / f)) << f;
  }
}

// The GLM-5.2 converter quantized the nested embedding of a GLM-5.3-Flash checkpoint and the
// runtime refused it at load (#1368): here the GLM-5.2 target refuses the family up front.
TEST(Glm53, TheGlm52TargetRefusesAGlm53FlashCheckpoint) {
  TempDir d;
  const std::string src = make(d);
  for (const char* t : {"colibri-glm", "generic"}) {
    const auto r = run_cli({"convert", src, "-o", (d / "x").string(), "--target", t});
    EXPECT_EQ(r.exit_code, 2) << t << ": " << r.out;
    EXPECT_NE(r.err.find("glm5_next"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d / "x")) << t;
  }
  const auto r = run_cli({"convert", src, "-o", (d / "x").string(), "--target", "colibri-glm"});
  EXPECT_NE(r.err.find("--target colibri-glm53"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule target.family"), std::string::npos) << r.err;
}

TEST(Glm53, BadInputIsRefusedBeforeAnyOutput) {
  TempDir d;
  const std::string src = make(d);
  const fs::path cfg = fs::path(src) / "config.json";
  const std::vector<std::uint8_t> saved = testing::read_bytes(cfg);
  struct Case {
    const char* key;
    int value;
    const char* expect;
  };
  for (const Case& c : {Case{"moe_intermediate_size", 96, "rule glm53.group"},
                        Case{"moe_intermediate_size", 64, "the config implies [64, 192]"},
                        Case{"hidden_size", 256, "the config implies"}}) {
    auto j = read_json(cfg);
    j["text_config"][c.key] = c.value;
    testing::write_text(cfg, j.dump(2));
    const auto r = run_cli({"convert", src, "-o", (d / "x").string()});
    EXPECT_EQ(r.exit_code, 2) << c.key << ": " << r.out;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.key << ": " << r.err;
    EXPECT_FALSE(fs::exists(d / "x")) << c.key;
    testing::write_bytes(cfg, saved);
  }
  const auto s = run_cli({"convert", src, "-o", (d / "x").string(), "--to", "int4-g128"});
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.err.find("rule target.scheme"), std::string::npos) << s.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

TEST(Glm53, AnUnknownNameStopsTheRunBeforeAnyOutput) {
  TempDir d;
  const std::string src = make(d);
  const std::string bad = (d / "bad").string();
  ASSERT_EQ(run_cli({"reshard", src, "-o", bad}).exit_code, 0);
  const std::string header =
      R"({"model.language_model.layers.1.self_attn.rotary_emb.inv_freq":{"dtype":"F32",)"
      R"("shape":[2],"data_offsets":[0,8]}})";
  std::vector<std::uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(header.size() >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + 8, 0);
  testing::write_bytes(fs::path(bad) / "zz-extra.safetensors", bytes);
  fs::remove(fs::path(bad) / "model.safetensors.index.json");
  const auto r = run_cli({"convert", bad, "-o", (d / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("rotary_emb.inv_freq"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "out"));
}

// glm53.c streams U8 experts by byte count: a config that no longer fits them fails.
TEST(Glm53, CheckLoadCatchesWhatTheLoaderRefuses) {
  TempDir d;
  const std::string src = make(d);
  const std::string out = (d / "out").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", out}).exit_code, 0);
  auto cfg = read_json(fs::path(out) / "config.json");
  cfg["text_config"]["moe_intermediate_size"] = 256;
  testing::write_text(fs::path(out) / "config.json", cfg.dump());
  auto r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("mlp.experts.0.gate_proj.weight"), std::string::npos) << r.out;
  cfg["text_config"]["moe_intermediate_size"] = 128;
  // glm53.c reads full_attn_layers 0-based and refuses a list layer_types contradicts.
  cfg["text_config"]["linear_attn_config"]["full_attn_layers"] = {2, 4};
  testing::write_text(fs::path(out) / "config.json", cfg.dump());
  r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("full_attn_layers[0] (2)"), std::string::npos) << r.out;
  cfg["text_config"].erase("layer_types");
  testing::write_text(fs::path(out) / "config.json", cfg.dump());
  r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("layer_types"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qrepack
