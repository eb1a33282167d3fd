// Kimi K3's reference forward pass, its oracle and eval, through the binary: against an
// independent torch implementation that steps token by token as c/kimi_k3.c does
// (tests/python/kimi_k3_forward.py), on the release-layout fixture (MXFP4 experts), on the same
// model with the experts expanded to BF16 by the torch side's own MXFP4 decoder, and on
// colibri-kimi-k3's int8 and int4-g64 containers; across thread counts; with eval's gates and
// the refusals.
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

class KimiK3Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_cli({"fixture", "kimi-k3", "--oracle", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(run_cli({"convert", src(), "-o", out("int8")}).exit_code, 0);
    ASSERT_EQ(run_cli({"convert", src(), "--to", "int4-g64", "-o", out("int4")}).exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "k3").string(); }
  static std::string out(const std::string& s) { return (*dir_ / s).string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* KimiK3Model::dir_ = nullptr;

// The oracle's logits, argmaxes and greedy continuation, each recomputed by torch; returns the
// logits file's bytes.
std::vector<std::uint8_t> expect_torch_agrees(const std::string& ck, const fs::path& tmp) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  const auto r = run_cli({"oracle", ck, "-o", ref, "--logits", logits});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  const auto j = read_json(ref);
  EXPECT_EQ(run_test_python("kimi_k3_forward.py", {ck, joined_ids(j["full_ids"]),
                                                   std::to_string(j["prompt_ids"].size()), logits}),
            0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
  return read_bytes(logits);
}

TEST_F(KimiK3Model, ForwardPassMatchesAnIndependentTorchImplementation) {
  const auto release = expect_torch_agrees(src(), tmp.path());
  expect_torch_agrees(out("int8"), tmp.path());
  expect_torch_agrees(out("int4"), tmp.path());
  // MXFP4 decoded exactly: the experts expanded to BF16 by the torch side's own decoder are the
  // same model, so the logits are the same bytes.
  const auto bf16 = (tmp / "bf16").string();
  ASSERT_EQ(run_test_python("kimi_k3_forward.py", {"--expand-experts", src(), bf16}), 0);
  EXPECT_EQ(expect_torch_agrees(bf16, tmp.path()), release);
}

TEST_F(KimiK3Model, FixtureOracleFollowsTheSchema) {
  const auto fixture_ref = fs::path(src()) / "ref_kimi_k3.json";
  const auto j = read_json(fixture_ref);
  EXPECT_EQ(j.size(), 3u);  // ref_glm.json's fields: c/kimi_k3.c reads no reference file
  EXPECT_EQ(j["prompt_ids"], nlohmann::json::array({1, 2, 3, 4, 5}));
  ASSERT_EQ(j["full_ids"].size(), 37u);  // kimi_k3.c's --ngen default: 32
  ASSERT_EQ(j["tf_pred"].size(), 37u);
  for (std::size_t i = 4; i + 1 < 37; ++i) EXPECT_EQ(j["tf_pred"][i], j["full_ids"][i + 1]) << i;
  const auto again = tmp / "again.json";
  const auto r = run_cli({"oracle", src(), "-o", again.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ref_kimi_k3.json (kimi_k3, for c/kimi_k3.c)"), std::string::npos) << r.out;
  EXPECT_EQ(read_bytes(again), read_bytes(fixture_ref));
}

TEST_F(KimiK3Model, OracleIsByteIdenticalForAnyThreadCount) {
  testing::expect_oracle_same_for_any_thread_count(src(), tmp.path(), {"--new-tokens", "12"});
}

// The release against its own dequantized f32 (the baseline), and the containers: int8 follows
// the source closer than int4-g64, and a misread container would scramble the model.
TEST_F(KimiK3Model, EvalOnTheReleaseAndColibriKimiK3Containers) {
  const auto self = eval_json({"eval", src(), src()});
  EXPECT_EQ(self["top1_agreement"], 1.0);
  EXPECT_EQ(self["kl_max"], 0.0);
  const auto both = eval_json({"eval", src(), out("int8"), out("int4")});
  ASSERT_EQ(both["outputs"].size(), 2u);
  const auto& i8 = both["outputs"][0];
  const auto& i4 = both["outputs"][1];
  EXPECT_LT(i8["kl_mean"].get<double>(), i4["kl_mean"].get<double>());
  EXPECT_GT(i8["top1_agreement"].get<double>(), 0.9);
  EXPECT_GT(i4["top1_agreement"].get<double>(), 0.25);  // scrambled: about 1/256
  const auto gate = run_cli({"eval", src(), out("int4"), "--min-top1", "0.999"});
  EXPECT_EQ(gate.exit_code, 1);
  EXPECT_NE(gate.err.find("eval.min_top1"), std::string::npos) << gate.err;
  const auto prog = run_cli({"eval", src(), out("int8"), "--progress", "--sequences", "1"});
  ASSERT_EQ(prog.exit_code, 0) << prog.err;
  EXPECT_NE(prog.err.find("layer 1/4 (KDA, dense)"), std::string::npos) << prog.err;
  EXPECT_NE(prog.err.find("layer 4/4 (MLA, MoE)"), std::string::npos) << prog.err;
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

TEST_F(KimiK3Model, RefusalsNameTheVariantBeforeAnyWeightIsReadAndWriteNothing) {
  // A tensor missing, so a pass that read weights first would name it instead.
  const fs::path ck = tmp / "edited";
  ASSERT_EQ(
      run_test_python("kimi_k3.py", {"mutate", src(), ck.string(), "--drop",
                                     "language_model.model.layers.3.self_attn.g_proj.weight"}),
      0);
  const struct {
    const char* key;
    nlohmann::json value;
    const char* says;
  } cases[] = {
      {"mla_use_nope", false, "mla_use_nope is not true"},
      {"routed_scaling_factor", 2.5, "routed_scaling_factor 2.5"},
      {"moe_router_activation_func", "softmax", "moe_router_activation_func \"softmax\""},
      {"num_expert_group", 4, "num_expert_group 4"},
      {"attn_res_block_size", nullptr, "a Kimi Linear model"},
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
  // Without a variant, the missing tensor is named.
  auto r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("layers.3.self_attn.g_proj.weight"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // A stored shape the config does not imply is named before anything is computed.
  const fs::path shaped = tmp / "shaped";
  ASSERT_EQ(run_test_python("kimi_k3.py",
                            {"mutate", src(), shaped.string(), "--reshape",
                             "language_model.model.layers.0.mlp.up_proj.weight", "64", "128"}),
            0);
  r = run_cli({"eval", src(), shaped.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("layers.0.mlp.up_proj.weight"), std::string::npos) << r.err;
  // attention_only is the Qwen3.5 / 3.6 hybrid's mode, not Kimi K3's.
  r = run_cli({"oracle", src(), "-o", (tmp / "x.json").string(), "--mode", "attention_only"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
}

}  // namespace
}  // namespace qrepack
