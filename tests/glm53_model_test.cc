// GLM-5.3-Flash's reference forward pass, its oracle and eval, through the binary: against an
// independent torch implementation that steps token by token as c/glm53.c does
// (tests/python/glm53_forward.py), on the release-layout fixture (FP8 128x128 experts), on the
// same model with the indexer's tail selection switched on, and on the colibri-glm53 container
// (int4-g64 experts, BF16 residents); across thread counts; with eval's gates and the refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
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

class Glm53Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_cli({"fixture", "glm53", "--oracle", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(run_cli({"convert", src(), "--target", "colibri-glm53", "-o", out()}).exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "glm53").string(); }
  static std::string out() { return (*dir_ / "c53").string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* Glm53Model::dir_ = nullptr;

nlohmann::json full_ids(const nlohmann::json& ref) {
  nlohmann::json ids = ref["prompt_ids"];
  for (const auto& t : ref["greedy_new_ids"]) ids.push_back(t);
  return ids;
}

// The oracle's logits (prompt and continuation, teacher-forced), argmaxes and greedy
// continuation, each recomputed by torch; returns the logits file's bytes.
std::vector<std::uint8_t> expect_torch_agrees(const std::string& ck, const fs::path& tmp) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  const auto r = run_cli({"oracle", ck, "-o", ref, "--logits", logits});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  const auto j = read_json(ref);
  EXPECT_EQ(run_test_python("glm53_forward.py", {ck, joined_ids(full_ids(j)),
                                                 std::to_string(j["prompt_ids"].size()), logits}),
            0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
  return read_bytes(logits);
}

void edit_text_config(const fs::path& dir, const char* key, const nlohmann::json& value) {
  auto cfg = read_json(dir / "config.json");
  if (value.is_null()) {
    cfg["text_config"].erase(key);
  } else {
    cfg["text_config"][key] = value;
  }
  testing::write_text(dir / "config.json", cfg.dump());
}

TEST_F(Glm53Model, ForwardPassMatchesAnIndependentTorchImplementation) {
  const auto fp8 = expect_torch_agrees(src(), tmp.path());
  const auto int4 = expect_torch_agrees(out(), tmp.path());
  EXPECT_NE(fp8, int4);  // the container's int4 experts are a different model
  // The indexer's always-selected tail: another selection, the same agreement.
  const fs::path tail = tmp / "tail";
  fs::copy(src(), tail, fs::copy_options::recursive);
  edit_text_config(tail, "index_kpool_always_select_tail", true);
  EXPECT_NE(expect_torch_agrees(tail.string(), tmp.path()), fp8);
}

TEST_F(Glm53Model, FixtureOracleFollowsTheSchema) {
  const auto fixture_ref = fs::path(src()) / "ref.json";
  const auto j = read_json(fixture_ref);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json::array({5, 7, 9, 11, 13, 17, 19, 23}));
  ASSERT_EQ(j["teacher_forcing_ids"].size(), 8u);  // over the prompt, as make_glm53_tiny.py
  ASSERT_EQ(j["greedy_new_ids"].size(), 4u);       // its four greedy tokens
  ASSERT_EQ(j["last_logits"].size(), 320u);
  EXPECT_EQ(j["teacher_forcing_ids"][7], j["greedy_new_ids"][0]);
  // The top 8 of the last prompt position, in decreasing order, are last_logits' values.
  ASSERT_EQ(j["last_logits_top_ids"].size(), 8u);
  double prev = 1e30;
  for (std::size_t i = 0; i < 8; ++i) {
    const double v = j["last_logits_top_values"][i];
    EXPECT_EQ(v, j["last_logits"][j["last_logits_top_ids"][i].get<std::size_t>()]);
    EXPECT_LE(v, prev);
    prev = v;
  }
  const double top = j["last_logits_top_values"][0];
  for (const auto& v : j["last_logits"]) EXPECT_LE(v.get<double>(), top);
  EXPECT_EQ(j["last_logits_top_ids"][0], j["greedy_new_ids"][0]);
  const auto again = tmp / "again.json";
  const auto r = run_cli({"oracle", src(), "-o", again.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("for c/glm53.c"), std::string::npos) << r.out;
  EXPECT_EQ(read_bytes(again), read_bytes(fixture_ref));
}

TEST_F(Glm53Model, OracleIsByteIdenticalForAnyThreadCount) {
  testing::expect_oracle_same_for_any_thread_count(src(), tmp.path(), {"--new-tokens", "12"});
}

// The FP8 release against itself (the baseline) and the colibri-glm53 container against it:
// int4-g64 experts move the model, a misread container would scramble it (about 1/320).
TEST_F(Glm53Model, EvalOnTheReleaseAndTheColibriGlm53Container) {
  const auto self = eval_json({"eval", src(), src()});
  EXPECT_EQ(self["top1_agreement"], 1.0);
  EXPECT_EQ(self["kl_max"], 0.0);
  const auto c = eval_json({"eval", src(), out()});
  EXPECT_GT(c["top1_agreement"].get<double>(), 0.5);
  EXPECT_LT(c["top1_agreement"].get<double>(), 1.0);
  EXPECT_GT(c["kl_mean"].get<double>(), 0.0);
  EXPECT_LT(c["kl_mean"].get<double>(), 2.0);
  const auto gate = run_cli({"eval", src(), out(), "--min-top1", "0.999"});
  EXPECT_EQ(gate.exit_code, 1);
  EXPECT_NE(gate.err.find("eval.min_top1"), std::string::npos) << gate.err;
  const auto prog = run_cli({"eval", src(), out(), "--progress", "--sequences", "1"});
  ASSERT_EQ(prog.exit_code, 0) << prog.err;
  EXPECT_NE(prog.err.find("layer 1/4 (KDA, dense)"), std::string::npos) << prog.err;
  EXPECT_NE(prog.err.find("layer 4/4 (MLA+DSA, MoE)"), std::string::npos) << prog.err;
}

// Overwrites the first value of BF16 tensor `name` in `dir`'s shards with NaN.
void poison(const fs::path& dir, const std::string& name) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string head(n, '\0');
    f.read(head.data(), static_cast<std::streamsize>(n));
    const auto h = nlohmann::json::parse(head);
    if (!h.contains(name)) continue;
    f.seekp(static_cast<std::streamoff>(8 + n + h[name]["data_offsets"][0].get<std::uint64_t>()));
    const unsigned char nan[2] = {0xc0, 0x7f};
    f.write(reinterpret_cast<const char*>(nan), 2);
    return;
  }
  FAIL() << name << " not found";
}

TEST_F(Glm53Model, RefusalsNameTheVariantBeforeAnyWeightIsReadAndWriteNothing) {
  // A weight poisoned, so a pass that read weights first would name it instead.
  const fs::path ck = tmp / "poisoned";
  fs::copy(src(), ck, fs::copy_options::recursive);
  const std::string bad = "model.language_model.layers.0.mlp.up_proj.weight";
  poison(ck, bad);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* says;
  } cases[] = {
      {"qk_rope_head_dim", 64, "qk_rope_head_dim is not 0"},
      {"swiglu_limit", nullptr, "swiglu_limit is absent"},
      {"hc_sinkhorn_iters", 0, "hc_sinkhorn_iters is 0"},
      {"n_group", 4, "n_group 4"},
      {"index_kpool", 1, "index_kpool 1"},
      {"index_topk", 3, "index_topk 3"},
      {"layer_types", {"linear_attention", "mamba", "linear_attention", "mamba"}, "\"mamba\""},
  };
  for (const auto& c : cases) {
    fs::remove_all(tmp / "v");
    fs::copy(ck, tmp / "v", fs::copy_options::recursive);
    edit_text_config(tmp / "v", c.key, c.value);
    const auto r = run_cli({"oracle", (tmp / "v").string(), "-o", (tmp / "x.json").string()});
    EXPECT_EQ(r.exit_code, 2) << c.key;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp / "x.json"));
  }
  // Without a variant, the poisoned weight is named and nothing is written.
  auto r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // A stored shape the config does not imply is named before anything is computed.
  fs::remove_all(tmp / "v");
  fs::copy(src(), tmp / "v", fs::copy_options::recursive);
  edit_text_config(tmp / "v", "intermediate_size", 128);
  r = run_cli({"eval", src(), (tmp / "v").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("layers.0.mlp.gate_proj.weight"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qrepack
