// DeepSeek V4 Flash's forward pass (model_type deepseek_v4, as c/deepseek_v4.c computes it),
// its oracle and eval, through the binary: against an independent numpy implementation of the
// runtime (tests/python/deepseek_v4_flash_forward.py) on the deepseek-v4 fixture, for the
// oracle's 20-token prompt (the 1:4 compressor, the indexer choosing among its rows, the hash
// routed layer 0) and a 136-token one (the 1:128 compressor's first row, the window long
// passed), and on the same model with its FP8 / FP4 weights stored as BF16; across thread
// counts; eval; the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::joined_ids;
using testing::read_bytes;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;

class DeepseekV4Flash : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_cli({"fixture", "deepseek-v4", "--oracle", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "v4").string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* DeepseekV4Flash::dir_ = nullptr;

// The oracle's logits, argmaxes and greedy continuation, each recomputed by numpy.
void expect_numpy_agrees(const std::string& ck, const fs::path& tmp,
                         const std::vector<std::string>& extra) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  std::vector<std::string> args = {"oracle", ck, "-o", ref, "--logits", logits};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto c = read_json(ref)["cases"]["compressed"];
  EXPECT_EQ(run_test_python("deepseek_v4_flash_forward.py",
                            {ck, joined_ids(c["greedy_full_ids"]),
                             std::to_string(c["prompt_ids"].size()), logits}),
            0)
      << ck << ": needs Debian's python3-numpy";
}

TEST_F(DeepseekV4Flash, ForwardPassMatchesAnIndependentImplementation) {
  expect_numpy_agrees(src(), tmp.path(), {});
  std::string longer;
  for (int i = 0; i < 136; ++i) longer += (i ? "," : "") + std::to_string(5 + (i * 11) % 97);
  expect_numpy_agrees(src(), tmp.path(), {"--prompt", longer, "--new-tokens", "4"});
}

// The same model with its FP8 / FP4 weights stored as BF16 (decoded by the numpy side, exact
// in bf16): the pass quantizes the activations the same way, so the logits are the same bytes.
TEST_F(DeepseekV4Flash, Bf16CopyOfTheReleaseGivesTheSameLogits) {
  const auto bf16 = (tmp.path() / "bf16").string();
  ASSERT_EQ(run_test_python("deepseek_v4_flash_forward.py", {"--expand", src(), bf16}), 0);
  const auto la = (tmp.path() / "a.npy").string(), lb = (tmp.path() / "b.npy").string();
  ASSERT_EQ(
      run_cli({"oracle", src(), "-o", (tmp.path() / "a.json").string(), "--logits", la}).exit_code,
      0);
  const auto r = run_cli({"oracle", bf16, "-o", (tmp.path() / "b.json").string(), "--logits", lb});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_bytes(la), read_bytes(lb));
  expect_numpy_agrees(bf16, tmp.path(), {});
  const auto e = run_cli({"eval", src(), bf16, "--json", "--sequences", "2"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["top1_agreement"], 1.0);
  EXPECT_EQ(j["kl_max"], 0.0);
}

TEST_F(DeepseekV4Flash, FixtureOracleFollowsTheSchema) {
  const auto fixture_ref = fs::path(src()) / "ref.json";
  const auto j = read_json(fixture_ref);
  EXPECT_EQ(j["schema_version"], 1);
  const nlohmann::json prompt = {5,  12, 19, 26, 33, 40, 47, 54, 61, 68,
                                 75, 82, 89, 96, 6,  13, 20, 27, 34, 41};
  EXPECT_EQ(j["prompt_ids_compressed"], prompt);
  const auto c = j["cases"]["compressed"];
  EXPECT_EQ(c["prompt_ids"], prompt);
  ASSERT_EQ(c["greedy_new_ids"].size(), 4u);
  EXPECT_EQ(c["max_new_tokens"], 4);
  ASSERT_EQ(c["greedy_full_ids"].size(), 24u);
  ASSERT_EQ(c["teacher_forcing_ids"].size(), 24u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c["greedy_new_ids"][i], c["greedy_full_ids"][20 + i]);
    // Token by token, each new token is the teacher-forced argmax of the row before it.
    EXPECT_EQ(c["greedy_new_ids"][i], c["teacher_forcing_ids"][19 + i]);
  }
  const auto again = tmp / "again.json";
  const auto r = run_cli({"oracle", src(), "-o", again.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ref.json (deepseek_v4, for c/deepseek_v4.c)"), std::string::npos) << r.out;
  EXPECT_EQ(read_bytes(again), read_bytes(fixture_ref));
}

TEST_F(DeepseekV4Flash, OracleIsByteIdenticalForAnyThreadCount) {
  testing::expect_oracle_same_for_any_thread_count(src(), tmp.path());
}

// The release runs as downloaded: eval's baseline is the release against itself.
TEST_F(DeepseekV4Flash, EvalOfTheReleaseAgainstItself) {
  const auto r = run_cli({"eval", src(), src(), "--json", "--sequences", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["top1_agreement"], 1.0);
  EXPECT_EQ(j["kl_max"], 0.0);
}

TEST_F(DeepseekV4Flash, RefusalsNameTheVariantAndWriteNothing) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"scoring_func", "softmax", "scoring_func must be \"sqrtsoftplus\""},
      {"expert_dtype", nullptr, "expert_dtype must be \"fp4\""},
      {"n_shared_experts", 2, "n_shared_experts other than 1"},
  };
  for (const Case& c : cases) {
    const fs::path ck = tmp / "ck";
    fs::remove_all(ck);
    fs::copy(src(), ck, fs::copy_options::recursive);
    auto cfg = read_json(ck / "config.json");
    if (c.value.is_null()) {
      cfg.erase(c.key);
    } else {
      cfg[c.key] = c.value;
    }
    testing::write_text(ck / "config.json", cfg.dump());
    const auto out = tmp / "x.json";
    const auto r = run_cli({"oracle", ck.string(), "-o", out.string()});
    EXPECT_EQ(r.exit_code, 2) << c.key;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
}  // namespace qrepack
