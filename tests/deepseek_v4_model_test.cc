// DeepSeek V4.1's reference forward pass, its oracle and eval, through the binary: against an
// independent torch implementation that decodes token by token as c/deepseek_v41.c does
// (tests/python/deepseek_v4_forward.py), on the release-layout fixture (FP8 32x32 tiles, FP4
// experts, an engram table), on a longer continuation (every indexer pick contested, the
// window long passed), on a config whose second compressing layer reads the first's caches
// and candidate blocks (the two-level indexer), and on the same model with its FP8 / FP4
// weights expanded to BF16 by the torch side's own decoders; across thread counts; with eval
// and the refusals. DeepSeek V4 Flash: deepseek_v4_flash_model_test.cc.
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

class DeepseekV4Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_cli({"fixture", "deepseek-v41", "--oracle", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "v41").string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* DeepseekV4Model::dir_ = nullptr;

void edit_text_config(const fs::path& dir, const char* key, const nlohmann::json& value) {
  auto cfg = read_json(dir / "config.json");
  if (value.is_null()) {
    cfg["text_config"].erase(key);
  } else {
    cfg["text_config"][key] = value;
  }
  testing::write_text(dir / "config.json", cfg.dump());
}

fs::path copy_of(const std::string& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

// The oracle's logits, argmaxes and greedy continuation, each recomputed by torch; returns the
// logits file's bytes.
std::vector<std::uint8_t> expect_torch_agrees(const std::string& ck, const fs::path& tmp,
                                              const std::string& new_tokens = "8") {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  const auto r = run_cli({"oracle", ck, "-o", ref, "--logits", logits, "--new-tokens", new_tokens});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  const auto j = read_json(ref);
  EXPECT_EQ(
      run_test_python("deepseek_v4_forward.py", {ck, joined_ids(j["full_ids"]),
                                                 std::to_string(j["prompt_ids"].size()), logits}),
      0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
  return read_bytes(logits);
}

TEST_F(DeepseekV4Model, ForwardPassMatchesAnIndependentTorchImplementation) {
  const auto release = expect_torch_agrees(src(), tmp.path());
  expect_torch_agrees(src(), tmp.path(), "40");
  // Layer 2 compresses 1:2 like layer 1 but is no kv source: it reads layer 1's compressed KV
  // and index keys, and filters its picks with layer 1's candidate blocks.
  const fs::path two_level = copy_of(src(), tmp / "two_level");
  edit_text_config(two_level, "compress_ratios", {0, 2, 2, 0});
  edit_text_config(two_level, "kv_source_layers", {1});
  edit_text_config(two_level, "kv_source_layer_ids", {1});
  edit_text_config(two_level, "candidate_source_layer", 1);
  const auto masked = expect_torch_agrees(two_level.string(), tmp.path(), "24");
  edit_text_config(two_level, "candidate_source_layer", -1);
  EXPECT_NE(expect_torch_agrees(two_level.string(), tmp.path(), "24"), masked);
  // What the fixture's config leaves to the runtime's defaults, each as make_dsv41_tiny.py sets
  // it: YaRN on the compressing layers (original_seq_len 32 of 256 positions, factor 16), the
  // SwiGLU clamp, the routed experts' scale. (All three at once put near-tied index picks at a
  // few positions, where f32 and float64 choose differently.)
  const struct {
    const char* key;
    nlohmann::json value;
  } knobs[] = {{"original_seq_len", 32}, {"swiglu_limit", 10.0}, {"route_scale", 1.5}};
  for (const auto& k : knobs) {
    const fs::path v = copy_of(src(), tmp / "knob");
    edit_text_config(v, k.key, k.value);
    if (std::string(k.key) == "original_seq_len") edit_text_config(v, "rope_factor", 16.0);
    EXPECT_NE(expect_torch_agrees(v.string(), tmp.path()), release) << k.key;
  }
  // FP8 and FP4 decoded exactly: the weights expanded to BF16 by the torch side's own decoders
  // are the same model, so the logits are the same bytes.
  const auto bf16 = (tmp / "bf16").string();
  ASSERT_EQ(run_test_python("deepseek_v4_forward.py", {"--expand", src(), bf16}), 0);
  EXPECT_EQ(expect_torch_agrees(bf16, tmp.path()), release);
}

TEST_F(DeepseekV4Model, FixtureOracleFollowsTheSchema) {
  const auto fixture_ref = fs::path(src()) / "ref.json";
  const auto j = read_json(fixture_ref);
  // make_dsv41_tiny.py's ref.json without its DSpark and vision parts.
  EXPECT_EQ(j.size(), 5u);
  EXPECT_TRUE(j["seed"].is_null());
  EXPECT_EQ(j["prompt_ids"],
            nlohmann::json::array({177, 108, 28, 250, 26, 4, 230, 64, 62, 183, 111, 196}));
  ASSERT_EQ(j["output_ids"].size(), 8u);  // its --max-new default
  ASSERT_EQ(j["full_ids"].size(), 20u);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(j["output_ids"][i], j["full_ids"][12 + i]);
  const auto again = tmp / "again.json";
  const auto r = run_cli({"oracle", src(), "-o", again.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ref.json (deepseek_v41, for c/deepseek_v41.c)"), std::string::npos)
      << r.out;
  auto a = read_json(again), f = read_json(fixture_ref);
  a.erase("model");
  f.erase("model");
  EXPECT_EQ(a, f);
}

TEST_F(DeepseekV4Model, OracleIsByteIdenticalForAnyThreadCount) {
  testing::expect_oracle_same_for_any_thread_count(src(), tmp.path(), {"--new-tokens", "12"});
}

// The release runs as downloaded, so eval's baseline is the release against its own
// dequantized f32: itself, and the copy whose FP8 / FP4 weights are stored decoded.
TEST_F(DeepseekV4Model, EvalOfTheReleaseAgainstItsDequantizedWeights) {
  const auto self = eval_json({"eval", src(), src()});
  EXPECT_EQ(self["top1_agreement"], 1.0);
  EXPECT_EQ(self["kl_max"], 0.0);
  const auto bf16 = (tmp.path() / "bf16").string();
  ASSERT_EQ(run_test_python("deepseek_v4_forward.py", {"--expand", src(), bf16}), 0);
  const auto expanded = eval_json({"eval", src(), bf16, "--sequences", "2"});
  EXPECT_EQ(expanded["top1_agreement"], 1.0);
  EXPECT_EQ(expanded["kl_max"], 0.0);
  const auto prog = run_cli({"eval", src(), src(), "--progress", "--sequences", "1"});
  ASSERT_EQ(prog.exit_code, 0) << prog.err;
  EXPECT_NE(prog.err.find("layer 2/4 (compress 1:2)"), std::string::npos) << prog.err;
}

TEST_F(DeepseekV4Model, RefusalsNameTheVariantBeforeAnyWeightIsReadAndWriteNothing) {
  // Layer 0's attention weights gone, so a pass that read weights first would name them.
  const fs::path ck = tmp / "edited";
  ASSERT_EQ(run_test_python("deepseek_v4_forward.py",
                            {"--drop", src(), ck.string(), "layers.0.attn.wq_a.weight"}),
            0);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* says;
  } cases[] = {
      {"score_func", "softmax", "score_func \"softmax\""},
      {"gate_temp", 0.5, "gate_temp"},
      {"n_shared_experts", 2, "n_shared_experts other than 1"},
      {"num_hash_layers", 3, "hash routing"},
      {"candidate_source_layer", 0, "candidate_source_layer must name a compressing"},
      {"kv_source_layers", {2}, "layer 1 compresses 1:2 but no kv source"},
  };
  for (const auto& c : cases) {
    const fs::path v = copy_of(ck.string(), tmp / "v");
    edit_text_config(v, c.key, c.value);
    const auto r = run_cli({"oracle", v.string(), "-o", (tmp / "x.json").string()});
    EXPECT_EQ(r.exit_code, 2) << c.key;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp / "x.json"));
  }
  // The engram's hash tables are needed, and named when missing.
  const fs::path no_sidecar = copy_of(ck.string(), tmp / "no_sidecar");
  fs::remove(no_sidecar / "dsv41_engram.json");
  auto r = run_cli({"oracle", no_sidecar.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("dsv41_engram.json is missing"), std::string::npos) << r.err;
  // Without a variant, the missing tensor is named, and nothing is written.
  r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("layers.0.attn.wq_a.weight"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
}

}  // namespace
}  // namespace qrepack
