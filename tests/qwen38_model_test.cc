// Qwen3.8-Flash-Next's reference forward pass, its ref.json (schema 2) and eval, through the
// binary: against an independent torch implementation that steps token by token as
// c/qwen38_core.h does (tests/python/qwen38_forward.py, its own FP8 / int4 decoders), on the
// BF16 release fixture (fused experts), the official FP8 one, colibri-qwen38-int4 overlays of
// both and the colibri-qwen38-experts-int4g64 sidecar; across thread counts; with eval and the
// refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::eval_json;
using testing::joined_ids;
using testing::read_bytes;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;

class Qwen38Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(run_cli({"fixture", "qwen38", "--oracle", "-o", path("bf16")}).exit_code, 0);
    ASSERT_EQ(run_cli({"fixture", "qwen38-fp8", "--oracle", "-o", path("fp8")}).exit_code, 0);
    const auto overlay = {"--target", "colibri-qwen38-int4", "-o"};
    std::vector<std::string> a = {"convert", path("fp8")}, b = {"convert", path("bf16")};
    a.insert(a.end(), overlay.begin(), overlay.end());
    b.insert(b.end(), overlay.begin(), overlay.end());
    a.push_back(path("overlay"));
    b.push_back(path("overlay16"));
    ASSERT_EQ(run_cli(a).exit_code, 0);
    ASSERT_EQ(run_cli(b).exit_code, 0);
    // The sidecar where the runtime looks for it: inside a copy of the FP8 snapshot.
    fs::copy(path("fp8"), path("snap"), fs::copy_options::recursive);
    fs::remove(fs::path(path("snap")) / "ref.json");
    ASSERT_EQ(run_cli({"convert", path("snap"), "-o", sidecar()}).exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const std::string& s) { return (*dir_ / s).string(); }
  static std::string sidecar() { return path("snap") + "/experts-int4g64"; }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* Qwen38Model::dir_ = nullptr;

// The oracle's logits, argmaxes and greedy continuation, each recomputed by torch (`release`:
// the directory an experts-only checkpoint is read with); returns the logits file's bytes.
std::vector<std::uint8_t> expect_torch_agrees(const std::string& ck, const fs::path& tmp,
                                              const std::string& release = "",
                                              const std::vector<std::string>& more = {}) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  std::vector<std::string> args = {"oracle", ck, "-o", ref, "--logits", logits};
  if (!release.empty()) args.insert(args.end(), {"--release", release});
  args.insert(args.end(), more.begin(), more.end());
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  const auto j = read_json(ref);
  std::vector<std::string> py = {ck, joined_ids(j["full_ids"]),
                                 std::to_string(j["prompt_ids"].size()), logits};
  if (!release.empty()) py.push_back(release);
  EXPECT_EQ(run_test_python("qwen38_forward.py", py), 0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
  EXPECT_EQ(run_test_python("qwen38_forward.py", {"--check-ref", ref, logits}), 0) << ck;
  return read_bytes(logits);
}

TEST_F(Qwen38Model, ForwardPassMatchesAnIndependentTorchImplementation) {
  const auto bf16 = expect_torch_agrees(path("bf16"), tmp.path());
  const auto fp8 = expect_torch_agrees(path("fp8"), tmp.path());
  const auto overlay = expect_torch_agrees(path("overlay"), tmp.path(), path("fp8"));
  expect_torch_agrees(path("overlay16"), tmp.path(), path("bf16"));
  // The sidecar with its snapshot given, and found as its parent.
  const auto in_snap = expect_torch_agrees(sidecar(), tmp.path(), path("snap"));
  EXPECT_EQ(expect_torch_agrees(sidecar(), tmp.path()), in_snap);
  // 52 positions: 13 indexer blocks of 4, of which 2 are attended (budget 8) with the tail.
  expect_torch_agrees(path("fp8"), tmp.path(), "",
                      {"--prompt", "1,3,4,5,6,7,8,9,10,11,12,13", "--new-tokens", "40"});
  // Each source holds other weights: the checks above would pass on any one of them only if
  // the decoders read it as stored.
  EXPECT_NE(bf16, fp8);
  EXPECT_NE(fp8, overlay);
}

TEST_F(Qwen38Model, FixtureOracleFollowsSchemaTwo) {
  for (const char* name : {"bf16", "fp8"}) {
    const auto fixture_ref = fs::path(path(name)) / "ref.json";
    const auto j = read_json(fixture_ref);
    const std::vector<std::string> keys = {
        "schema_version",  "model",         "seed",         "transformers_version",
        "text_only",       "fp8_experts",   "naming",       "config_summary",
        "reference_dtype", "prefill",       "decode",       "prompt_ids",
        "full_ids",        "generated_ids", "final_logits", "cache_class"};
    const auto bytes = read_bytes(fixture_ref);
    const auto ordered = nlohmann::ordered_json::parse(bytes.begin(), bytes.end());
    std::vector<std::string> got;  // in the file's order
    for (const auto& [k, v] : ordered.items()) got.push_back(k);
    EXPECT_EQ(got, keys);
    EXPECT_EQ(j["fp8_experts"], std::string(name) == "fp8");
    EXPECT_EQ(j["prompt_ids"], nlohmann::json::array({1, 3, 4, 5, 6}));  // the generator's
    EXPECT_EQ(j["generated_ids"].size(), 8u);                            // its --max-new
    EXPECT_EQ(j["final_logits"].size(), 256u);
    EXPECT_EQ(j["prefill"]["router_layers"], 2);
    EXPECT_EQ(j["prefill"]["last_hidden_shape"], nlohmann::json::array({1, 5, 192}));
    EXPECT_EQ(j["decode"]["last_hidden_shape"], nlohmann::json::array({1, 1, 192}));
    // Recomputed from the oracle's own run: byte-identical.
    const auto again = tmp / "again.json";
    const auto r = run_cli({"oracle", path(name), "-o", again.string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("ref.json (qwen4_exp, for c/qwen38.c)"), std::string::npos) << r.out;
    EXPECT_EQ(read_bytes(again), read_bytes(fixture_ref));
  }
}

TEST_F(Qwen38Model, OracleIsByteIdenticalForAnyThreadCount) {
  testing::expect_oracle_same_for_any_thread_count(path("fp8"), tmp.path(), {"--new-tokens", "12"});
}

// The releases against themselves (the baseline) and the int4 containers against the release
// they were converted from: close (int4-g64 of every expert), not identical, and a misread
// expert store would scramble the model.
TEST_F(Qwen38Model, EvalOnTheReleasesAndBothInt4Containers) {
  const auto self = eval_json({"eval", path("fp8"), path("fp8")});
  EXPECT_EQ(self["top1_agreement"], 1.0);
  EXPECT_EQ(self["kl_max"], 0.0);
  const auto both = eval_json({"eval", path("fp8"), path("overlay"), sidecar()});
  ASSERT_EQ(both["outputs"].size(), 2u);
  for (const auto& o : both["outputs"]) {
    EXPECT_GT(o["top1_agreement"].get<double>(), 0.9) << o;
    EXPECT_GT(o["kl_mean"].get<double>(), 0.0) << o;
    EXPECT_LT(o["kl_mean"].get<double>(), 0.01) << o;
  }
  const auto bf = eval_json({"eval", path("bf16"), path("overlay16")});
  EXPECT_GT(bf["top1_agreement"].get<double>(), 0.9);
  const auto prog =
      run_cli({"eval", path("fp8"), path("overlay"), "--progress", "--sequences", "1"});
  ASSERT_EQ(prog.exit_code, 0) << prog.err;
  EXPECT_NE(prog.err.find("layer 1/2 (GDN)"), std::string::npos) << prog.err;
  EXPECT_NE(prog.err.find("layer 2/2 (QSA, PLE)"), std::string::npos) << prog.err;
}

void edit_text_config(const fs::path& dir, const char* key, const nlohmann::json& value) {
  auto cfg = read_json(dir / "config.json");
  cfg["text_config"][key] = value;
  testing::write_text(dir / "config.json", cfg.dump());
}

TEST_F(Qwen38Model, RefusalsNameTheVariantBeforeAnyWeightIsReadAndWriteNothing) {
  const struct {
    const char* key;
    nlohmann::json value;
    const char* says;
  } cases[] = {
      {"output_gate_type", "swish", "output_gate_type \"swish\""},
      {"tie_word_embeddings", true, "tie_word_embeddings true"},
      {"indexer_kv_heads", 2, "indexer_kv_heads other than 1"},
      {"ngram_size", 4, "ngram_size other than 3"},
      {"ple_layer_ids", nlohmann::json::array({1, 2}), "exactly one layer"},
      {"layer_types", nlohmann::json::array({"linear_attention", "sliding_attention"}),
       "layer type \"sliding_attention\""},
      {"model_type", "qwen3_5_moe_text", "text model_type \"qwen3_5_moe_text\""},
  };
  for (const auto& c : cases) {
    fs::remove_all(tmp / "v");
    fs::copy(path("fp8"), tmp / "v", fs::copy_options::recursive);
    edit_text_config(tmp / "v", c.key, c.value);
    // Every shard emptied: a pass that read anything but config.json first would fail on them.
    for (const auto& f : fs::directory_iterator(tmp / "v")) {
      if (f.path().extension() == ".safetensors") fs::resize_file(f.path(), 0);
    }
    const auto r = run_cli({"oracle", (tmp / "v").string(), "-o", (tmp / "x.json").string()});
    EXPECT_EQ(r.exit_code, 2) << c.key << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp / "x.json"));
  }
  // q38_validate_cfg's ranges: a config error, also before any weight is read.
  fs::remove_all(tmp / "v");
  fs::copy(path("fp8"), tmp / "v", fs::copy_options::recursive);
  edit_text_config(tmp / "v", "indexer_budget", 6);  // not a multiple of the ratio 4
  auto bad = run_cli({"oracle", (tmp / "v").string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("indexer_budget must be a positive multiple"), std::string::npos)
      << bad.err;
  EXPECT_NE(bad.err.find("forward.config"), std::string::npos) << bad.err;
  // An experts-only overlay without its release: refused, nothing written.
  auto r = run_cli({"oracle", path("overlay"), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--release DIR"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // An overlay read with a release of another geometry: the expert's bytes are named.
  r = run_cli({"eval", path("fp8"), path("overlay"), "--sequences", "1", "--length", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::copy(path("fp8"), tmp / "wide", fs::copy_options::recursive);
  edit_text_config(tmp / "wide", "moe_intermediate_size", 128);
  r = run_cli({"oracle", path("overlay"), "--release", (tmp / "wide").string(), "-o",
               (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("merged_weight"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
}

}  // namespace
}  // namespace qrepack
