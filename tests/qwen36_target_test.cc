// colibri-qwen36 as convert_qwen36.py @ab3caa78 writes it (reference/colibri-engines.md §9.1):
// the MTP head into model-mtp.safetensors, the vision tower into model-vision.safetensors with
// its meta, the dense variant, num_local_experts, the release's side files, and the refusals.
// Sources are the qwen36 fixture and its variants (tests/python/qwen36_variants.py); every
// output byte is checked against the independent derivation (tests/python/container_targets.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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

// Variant `kind` of the qwen36 fixture.
std::string variant(const TempDir& d, const std::string& kind) {
  const std::string out = (d / kind).string();
  EXPECT_EQ(run_test_python("qwen36_variants.py", {kind, write_fixture(d, "qwen36"), out}), 0)
      << kind;
  return out;
}

// Converts `src` with the target's defaults; the output equals the derivation byte for byte.
std::string convert_and_derive(const std::string& src) {
  const std::string out = src + "-out";
  const auto r = run_cli({"convert", src, "-o", out, "--target", "colibri-qwen36"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  EXPECT_EQ(run_test_python("container_targets.py", {"qwen36", src, out}), 0) << src;
  return out;
}

void expect_refused(const std::string& src, const std::string& rule, const std::string& words) {
  const auto r = run_cli({"convert", src, "-o", src + "-out", "--target", "colibri-qwen36"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(src + "-out"));
}

std::string text_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(Qwen36Target, TheMtpHeadAndTheVisionTowerAreConverted) {
  TempDir d;
  const std::string out = convert_and_derive(write_fixture(d, "qwen36"));
  // mtp_num_hidden_layers is the meta's first key (Python's json.dumps(indent=2), no newline).
  EXPECT_TRUE(text_of(fs::path(out) / "qwen36_meta.json")
                  .starts_with("{\n  \"mtp_num_hidden_layers\": 1,\n  \"model_type\""));
  const auto meta = read_json(fs::path(out) / "qwen36_meta.json");
  EXPECT_EQ(meta["image_token_id"], 248056);
  EXPECT_EQ(meta["vision"]["heads"], 2);
  EXPECT_EQ(meta["vision"]["out_hidden"], 64);
  const auto mtp = run_cli({"inspect", (fs::path(out) / "model-mtp.safetensors").string()});
  // 8 experts merged like the trunk's: int4 nibbles, 3 * 32 * 64 / 2 bytes each.
  const std::size_t at = mtp.out.find("mtp.layers.0.mlp.experts.7.merged_weight");
  ASSERT_NE(at, std::string::npos) << mtp.out;
  const std::string line = mtp.out.substr(at, mtp.out.find('\n', at) - at);
  EXPECT_NE(line.find("U8"), std::string::npos) << line;
  EXPECT_NE(line.find("[3072]"), std::string::npos) << line;
  EXPECT_NE(mtp.out.find("mtp.fc.weight"), std::string::npos) << mtp.out;
  const auto vision = run_cli({"inspect", (fs::path(out) / "model-vision.safetensors").string()});
  EXPECT_NE(vision.out.find("model.visual.merger.linear_fc1.weight"), std::string::npos);
}

TEST(Qwen36Target, ADenseModelConvertsWithItsMlp) {
  TempDir d;
  const std::string out = convert_and_derive(variant(d, "dense"));
  const auto meta = read_json(fs::path(out) / "qwen36_meta.json");
  EXPECT_EQ(meta["num_experts"], 0);
  EXPECT_EQ(meta["topk"], 0);
  EXPECT_EQ(meta["moe_inter"], 0);
  EXPECT_EQ(meta["shared_inter"], 128);  // intermediate_size
  EXPECT_EQ(meta["model_type"], "qwen3_5");
}

TEST(Qwen36Target, NumLocalExpertsIsNumExpertsAndIsWrittenSo) {
  TempDir d;
  const std::string out = convert_and_derive(variant(d, "local"));
  const auto config = read_json(fs::path(out) / "config.json");
  EXPECT_EQ(config["num_experts"], 8);
  EXPECT_EQ(read_json(fs::path(out) / "qwen36_meta.json")["num_experts"], 8);
}

TEST(Qwen36Target, TheReleasesSideFilesAreCopiedAndAHalfClefHeadIsRefused) {
  TempDir d;
  const std::string src = variant(d, "sides");
  const std::string out = convert_and_derive(src);
  for (const char* f : {"chat_template.jinja", "tokenizer_config.json", "preprocessor_config.json",
                        "joint_head_config.json", "joint_head.safetensors"}) {
    EXPECT_EQ(text_of(fs::path(out) / f), text_of(fs::path(src) / f)) << f;
  }
  // The head's safetensors is a side file, not a shard of the model.
  EXPECT_EQ(read_json(fs::path(out) / "qwen36_meta.json")["hidden"], 64);
  expect_refused(variant(d, "clef-half"), "qwen36.clef_pair", "joint_head.safetensors");
}

TEST(Qwen36Target, TheVisionTowerNeedsItsWholeConfigOrIsDroppedByName) {
  TempDir d;
  expect_refused(variant(d, "vision-part"), "qwen36.vision_config", "num_heads");
  const std::string out = convert_and_derive(variant(d, "vision-none"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "model-vision.safetensors"));
  EXPECT_FALSE(read_json(fs::path(out) / "qwen36_meta.json").contains("vision"));
  int dropped = 0;
  const auto manifest = read_json(fs::path(out) / "qrepack.json");
  for (const auto& s : manifest["sources"]) {
    dropped += s["rule"] == "qwen36.vision_without_config";
  }
  EXPECT_EQ(dropped, 2);
}

// Every regular file under `dir` with its bytes (links followed).
std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename()] = text_of(e.path());
  return out;
}

TEST(Qwen36Target, MtpOnlyAddsTheHeadBesideTheBaseContainerInItsScheme) {
  TempDir d;
  // B: the trunk alone, int4 groups of 32 with an int8 down slab.
  const std::string base = (d / "base").string();
  ASSERT_EQ(
      run_cli({"convert", variant(d, "trunk"), "-o", base, "--to", "int4-g32", "--bits", "down=8"})
          .exit_code,
      0);
  const auto before = contents(base);
  // The same scheme on the whole fixture: the head's bytes to expect.
  const std::string whole = (d / "whole").string();
  ASSERT_EQ(run_cli({"convert", write_fixture(d, "qwen36"), "-o", whole, "--to", "int4-g32",
                     "--bits", "down=8"})
                .exit_code,
            0);
  // SRC holds the head's shard only; its index names the trunk's, which is not there.
  const std::string out = (d / "out").string();
  const auto r = run_cli(
      {"convert", variant(d, "mtp-src"), "-o", out, "--mtp-only", "--base-container", base});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  EXPECT_EQ(text_of(fs::path(out) / "model-mtp.safetensors"),
            text_of(fs::path(whole) / "model-mtp.safetensors"));
  // B's meta with the head declared, in place, and a final newline (upstream's append_mtp).
  std::string meta = before.at("qwen36_meta.json");
  const std::string from = "\"mtp_num_hidden_layers\": 0", to = "\"mtp_num_hidden_layers\": 1";
  ASSERT_NE(meta.find(from), std::string::npos);
  meta.replace(meta.find(from), from.size(), to);
  EXPECT_EQ(text_of(fs::path(out) / "qwen36_meta.json"), meta + "\n");
  // Every other file of B is an absolute link to it; B is untouched.
  for (const auto& [name, bytes] : before) {
    if (name == "qwen36_meta.json" || name == "qrepack.json") continue;
    const fs::path p = fs::path(out) / name;
    ASSERT_TRUE(fs::is_symlink(p)) << name;
    EXPECT_EQ(fs::read_symlink(p), fs::canonical(fs::path(base) / name)) << name;
  }
  EXPECT_EQ(contents(base), before);
}

TEST(Qwen36Target, MtpOnlyRefusesAnotherModelsBaseFlagsAndWritingTheBase) {
  TempDir d;
  const std::string src = variant(d, "mtp-src");
  const std::string q3 = (d / "q3").string();
  ASSERT_EQ(run_cli({"fixture", "qwen3-moe", "-o", (d / "q3src").string()}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", (d / "q3src").string(), "-o", q3}).exit_code, 0);
  const auto refused = [&](std::vector<std::string> args, const std::string& rule,
                           const std::string& words) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  };
  const std::string out = (d / "out").string();
  refused({"convert", src, "-o", out, "--mtp-only", "--base-container", q3}, "qwen36.mtp_base",
          "another model");
  refused({"convert", src, "-o", out, "--mtp-only", "--base-container", q3, "--to", "int8-row"},
          "qwen36.mtp_only", "drop --to");
  refused({"convert", src, "-o", out, "--mtp-only"}, "qwen36.mtp_only", "go together");
  refused({"convert", src, "-o", q3 + "/sub", "--mtp-only", "--base-container", q3},
          "qwen36.mtp_only", "never writes");
  refused({"convert", variant(d, "trunk"), "-o", out, "--mtp-only", "--base-container", q3},
          "qwen36.mtp_only", "no mtp.* tensors");
  EXPECT_FALSE(fs::exists(out));
}

// An mlx-community source (MLX affine, mlx-lm's stacked switch_mlp experts) gives the bytes its
// decoded weights give: the same container as from the f32 checkpoint those decode to.
TEST(Qwen36Target, AnMlxSourceConvertsAsItsDecodedWeights) {
  TempDir d;
  const std::string mlx = (d / "mlx").string(), f32 = (d / "f32").string();
  ASSERT_EQ(run_cli({"fixture", "qwen3-moe", "--encoding", "mlx-affine", "-o", mlx}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", mlx, "-o", f32, "--to", "f32", "--target", "generic"}).exit_code,
            0);
  const auto a = run_cli({"convert", mlx, "-o", mlx + "-out", "--target", "colibri-qwen36"});
  const auto b = run_cli({"convert", f32, "-o", f32 + "-out", "--target", "colibri-qwen36"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  int files = 0;
  for (const auto& e : fs::directory_iterator(mlx + "-out")) {
    const std::string name = e.path().filename();
    if (!name.starts_with("model-")) continue;
    EXPECT_EQ(text_of(e.path()), text_of(fs::path(f32 + "-out") / name)) << name;
    ++files;
  }
  EXPECT_EQ(files, 4);  // globals and three layers
}

TEST(Qwen36Target, ASecondMtpLayerIsAnUnknownName) {
  TempDir d;
  expect_refused(variant(d, "mtp2"), "target.unknown_tensor", "mtp.layers.1.input_layernorm");
}

}  // namespace
}  // namespace qrepack
