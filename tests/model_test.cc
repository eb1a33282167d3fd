// The reference forward pass, the oracle and eval, end to end through the binary: against an
// independent torch implementation (tests/python/glm_reference.py), across thread counts, with
// eval's gates and the forward pass's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;

class Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--oracle", "-o", src()}).exit_code, 0);
    for (const char* s : {"int4-row", "int4-g64", "int8-row"}) {
      ASSERT_EQ(run_cli({"convert", src(), "--to", s, "-o", out(s)}).exit_code, 0) << s;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "fp8").string(); }
  static std::string out(const std::string& s) { return (*dir_ / s).string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* Model::dir_ = nullptr;

TEST_F(Model, ForwardPassMatchesAnIndependentTorchImplementation) {
  for (const std::string& ck : {src(), out("int4-g64"), out("int8-row")}) {
    const auto ref = (tmp / "ref.json").string(), logits = (tmp / "l.npy").string();
    const auto r = run_cli({"oracle", ck, "-o", ref, "--logits", logits});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(run_test_python("glm_reference.py", {ck, ref, logits}), 0)
        << ck << ": needs Debian's python3-torch (make test installs it)";
  }
}

TEST_F(Model, FixtureOracleIsTheOracleOfTheFixtureAndFollowsTheSchema) {
  const auto ref = tmp / "ref.json";
  ASSERT_EQ(run_cli({"oracle", src(), "-o", ref.string()}).exit_code, 0);
  EXPECT_EQ(read_bytes(ref), read_bytes(fs::path(src()) / "ref_glm.json"));
  const auto j = read_json(ref);
  EXPECT_EQ(j["prompt_ids"],
            nlohmann::json::array({3, 14, 159, 26, 53, 58, 200, 11, 77, 240, 5, 99}));
  ASSERT_EQ(j["full_ids"].size(), 32u);
  ASSERT_EQ(j["tf_pred"].size(), 32u);
  for (std::size_t i = 11; i + 1 < 32; ++i) EXPECT_EQ(j["tf_pred"][i], j["full_ids"][i + 1]) << i;
}

TEST_F(Model, OracleIsByteIdenticalForAnyThreadCount) {
  std::vector<std::vector<std::uint8_t>> refs, logits;
  for (const char* t : {"1", "2", "3"}) {
    const auto ref = tmp / (std::string("ref") + t), l = tmp / (std::string("l") + t);
    ASSERT_EQ(run_cli({"oracle", src(), "-o", ref.string(), "--logits", l.string(), "--threads", t,
                       "--prompt", "1,2,3", "--new-tokens", "5"})
                  .exit_code,
              0);
    refs.push_back(read_bytes(ref));
    logits.push_back(read_bytes(l));
  }
  EXPECT_EQ(refs[0], refs[1]);
  EXPECT_EQ(refs[0], refs[2]);
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(logits[0], logits[2]);
  EXPECT_EQ(read_json(tmp / "ref1")["full_ids"].size(), 8u);
}

// BF16, because FP8 block scales of a fused [2M, I] gate_up span gate and up rows: the FP8
// fused fixture is a (slightly) different model from the unfused one.
TEST_F(Model, FusedExpertsGiveTheSameOracle) {
  const auto fused = (tmp / "fused").string(), plain = (tmp / "plain").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--bf16", "--fused-experts", "-o", fused}).exit_code, 0);
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--bf16", "-o", plain}).exit_code, 0);
  const auto a = tmp / "a.json", b = tmp / "b.json";
  ASSERT_EQ(run_cli({"oracle", fused, "-o", a.string()}).exit_code, 0);
  ASSERT_EQ(run_cli({"oracle", plain, "-o", b.string()}).exit_code, 0);
  EXPECT_EQ(read_bytes(a), read_bytes(b));
}

double eval_json(const std::string& a, const std::string& b, const char* key) {
  const auto r = run_cli({"eval", a, b, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)[key].get<double>();
}

TEST_F(Model, EvalRanksConversionsAndItsGatesExitOne) {
  EXPECT_EQ(eval_json(src(), src(), "top1_agreement"), 1.0);
  EXPECT_EQ(eval_json(src(), src(), "kl_max"), 0.0);
  const double kl8 = eval_json(src(), out("int8-row"), "kl_mean");
  const double kl_g64 = eval_json(src(), out("int4-g64"), "kl_mean");
  const double kl_row = eval_json(src(), out("int4-row"), "kl_mean");
  EXPECT_LT(kl8, kl_g64);
  EXPECT_LT(kl_g64, kl_row);  // grouped scales beat per-row ones at the model level too
  EXPECT_GT(eval_json(src(), out("int8-row"), "top1_agreement"), 0.9);

  const auto gate = run_cli({"eval", src(), out("int4-row"), "--min-top1", "0.99"});
  EXPECT_EQ(gate.exit_code, 1);
  EXPECT_NE(gate.err.find("eval.min_top1"), std::string::npos) << gate.err;
  EXPECT_EQ(run_cli({"eval", src(), out("int4-row"), "--max-kl", "0.001"}).exit_code, 1);
  EXPECT_EQ(run_cli({"eval", src(), out("int8-row"), "--min-top1", "0.5"}).exit_code, 0);
  const auto prog = run_cli({"eval", src(), src(), "--progress", "--sequences", "1"});
  EXPECT_NE(prog.err.find("layer 5/5 (MoE)"), std::string::npos) << prog.err;
  EXPECT_NE(prog.out.find("1 sequences, 32 teacher-forced positions"), std::string::npos);
  const auto given = run_cli({"eval", src(), src(), "--ids", "1,2,3;4,5", "--json"});
  EXPECT_EQ(nlohmann::json::parse(given.out)["positions"], 5);
  // Several outputs: one table row each, the source's pass computed once.
  const auto many = run_cli({"eval", src(), out("int8-row"), out("int4-row"), "--json"});
  ASSERT_EQ(many.exit_code, 0) << many.err;
  const auto mj = nlohmann::json::parse(many.out);
  ASSERT_EQ(mj["outputs"].size(), 2u);
  EXPECT_EQ(mj["outputs"][1]["kl_mean"].get<double>(), kl_row);
  const auto table = run_cli({"eval", src(), out("int8-row"), out("int4-row")});
  EXPECT_NE(table.out.find("KL_MEAN"), std::string::npos);
  EXPECT_NE(table.out.find(out("int4-row")), std::string::npos);
  const auto both = run_cli({"eval", src(), out("int8-row"), out("int4-row"), "--min-top1", "0.9"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find(out("int4-row")), std::string::npos) << both.err;
}

TEST_F(Model, RefusalsAreOneLineWithExitTwo) {
  // Longer than index_topk: the DSA indexer would select keys.
  const fs::path edited = tmp / "edited";
  fs::copy(src(), edited);
  auto cfg = read_json(edited / "config.json");
  cfg["index_topk"] = 4;
  testing::write_text(edited / "config.json", cfg.dump());
  auto r = run_cli({"eval", edited.string(), edited.string(), "--length", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("index_topk 4"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli({"eval", edited.string(), edited.string(), "--length", "4"}).exit_code, 0);
  // A rope type the pass does not implement.
  cfg["rope_parameters"]["rope_type"] = "yarn";
  testing::write_text(edited / "config.json", cfg.dump());
  r = run_cli({"oracle", edited.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rope type \"yarn\""), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // Ids outside the vocabulary, bad id lists, bad counts.
  EXPECT_EQ(
      run_cli({"oracle", src(), "-o", (tmp / "x.json").string(), "--prompt", "256"}).exit_code, 2);
  EXPECT_EQ(
      run_cli({"oracle", src(), "-o", (tmp / "x.json").string(), "--prompt", "1,,2"}).exit_code, 2);
  EXPECT_EQ(run_cli({"eval", src(), src(), "--sequences", "0"}).exit_code, 2);
  // The oracle never replaces an input: a shard, the index or config.json.
  const auto files = testing::list_dir(src());
  const auto shard = *std::find_if(
      files.begin(), files.end(), [](const std::string& f) { return f.ends_with(".safetensors"); });
  for (const std::string& f :
       {std::string("config.json"), std::string("model.safetensors.index.json"), shard}) {
    const auto before = read_bytes(fs::path(src()) / f);
    r = run_cli({"oracle", src(), "-o", (fs::path(src()) / f).string()});
    EXPECT_EQ(r.exit_code, 2) << f;
    EXPECT_NE(r.err.find("output.not_input"), std::string::npos) << r.err;
    EXPECT_EQ(read_bytes(fs::path(src()) / f), before) << f;
  }
  r = run_cli({"oracle", src(), "-o", (tmp / "ok.json").string(), "--logits",
               (fs::path(src()) / "config.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(fs::exists(tmp / "ok.json"));
  // A conversion that dropped a weight the model needs names it.
  const auto dropped = (tmp / "dropped").string();
  ASSERT_EQ(run_cli({"convert", src(), "-o", dropped, "--drop", "layers\\.1\\.self_attn\\.o_proj",
                     "--no-coverage-gate"})
                .exit_code,
            0);
  r = run_cli({"eval", src(), dropped});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.layers.1.self_attn.o_proj.weight"), std::string::npos) << r.err;
}

// The fixture authors' bench model reproduces their measurement (reference/colibri.md §2.3):
// grouped g128 error 1.14-1.22x lower than per-row on the routed experts.
TEST(SeedBench, GroupedErrorRatioIsTheAuthorsOne) {
  TempDir dir;
  const auto m = (dir / "m").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--preset", "seed-bench", "-o", m}).exit_code, 0);
  double err[2];
  const char* schemes[2] = {"int4-row", "int4-g128"};
  for (int i = 0; i < 2; ++i) {
    const auto o = (dir / schemes[i]).string();
    ASSERT_EQ(run_cli({"convert", m, "--to", schemes[i], "--select", "mlp\\.experts\\.",
                       "--no-coverage-gate", "-o", o})
                  .exit_code,
              0);
    const auto v = run_cli({"verify", m, o, "--json"});
    ASSERT_EQ(v.exit_code, 0) << v.err;
    err[i] = nlohmann::json::parse(v.out)["classes"][std::string("experts ") + schemes[i]]["rel_l2"]
                 .get<double>();
  }
  const double ratio = err[0] / err[1];
  EXPECT_GE(ratio, 1.14) << err[0] << " / " << err[1];
  EXPECT_LE(ratio, 1.22) << err[0] << " / " << err[1];
}

}  // namespace
}  // namespace qrepack
