// `qrepack validate` on packs made by Debian's torch: the valid pack, the 252 rule and its
// exceptions, and one rejection per field.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

using testing::run_cli;

class Validate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_EQ(testing::run_test_python("make_omega_packs.py", {dir_->path().string()}), 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string file(const std::string& n) { return (*dir_ / n).string(); }
  static testing::TempDir* dir_;
};
testing::TempDir* Validate::dir_ = nullptr;

TEST_F(Validate, AcceptsAValidFixturePackAndWritesNothing) {
  const auto before = testing::list_dir(dir_->path());
  const auto r = run_cli({"validate", file("good.pt")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "validated 2/2 records\n");
  EXPECT_EQ(testing::list_dir(dir_->path()), before);
}

TEST_F(Validate, The252RuleAndItsExceptions) {
  auto r = run_cli({"validate", file("not_fixture.pt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("2 records selected, 252 expected"), std::string::npos) << r.err;
  r = run_cli({"validate", file("not_fixture.pt"), "--expected-records", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_cli({"validate", file("not_fixture.pt"), "--select", "down_proj"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "validated 1/1 records\n");
  r = run_cli({"validate", file("good.pt"), "--expected-records", "3"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"validate", file("good.pt"), "--select", "nothing-matches"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no records matched"), std::string::npos);
}

TEST_F(Validate, EachRejectReasonNamesTheRecordAndField) {
  const char* fields[] = {"format",
                          "rank",
                          "weight_bits",
                          "weight_res_q",
                          "out_features",
                          "lowrank_A",
                          "act_scale_table",
                          "duquant_rotation_blocks",
                          "duquant_rotation_perm"};
  for (const char* f : fields) {
    const auto r = run_cli({"validate", file(std::string("bad_") + f + ".pt")});
    EXPECT_EQ(r.exit_code, 2) << f;
    EXPECT_NE(r.err.find("mlp.down_proj' field '" + std::string(f) + "'"), std::string::npos)
        << f << ": " << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  const auto dt = run_cli({"validate", file("bad_duquant_rotation_perm_dtype.pt")});
  EXPECT_EQ(dt.exit_code, 2);
  EXPECT_NE(dt.err.find("int64"), std::string::npos) << dt.err;
}

TEST_F(Validate, IntegerFieldsGivenAsFloatsOrBoolsAreRefusedAndSaySo) {
  for (const auto& [f, field, got] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"bad_rank_float.pt", "rank", "the float 0"},
           {"bad_rank_bool.pt", "rank", "the bool False"},
           {"bad_a_bits_float.pt", "a_bits", "the float 4"}}) {
    const auto r = run_cli({"validate", file(f)});
    EXPECT_EQ(r.exit_code, 2) << f;
    EXPECT_NE(r.err.find("field '" + field + "': must be the integer"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(got), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("FlashRT's converter accepts it"), std::string::npos) << r.err;
  }
}

TEST_F(Validate, ExpectedRecordsZeroIsRefusedNotIgnored) {
  for (const char* cmd : {"validate", "convert"}) {
    std::vector<std::string> args = {cmd, file("good.pt"), "--expected-records", "0"};
    if (std::string(cmd) == "convert") {
      args.insert(args.end(), {"--to", "e0m3-sfb", "-o", (dir_->path() / "x.pt").string()});
    }
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find("--expected-records must be positive, got 0"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_->path() / "x.pt"));
}

TEST_F(Validate, ReportsEveryProblemNotJustTheFirst) {
  const auto r = run_cli({"validate", file("two_defects.pt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("2 problem(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("field 'rank'"), std::string::npos);
  EXPECT_NE(r.err.find("field 'a_bits'"), std::string::npos);
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

TEST_F(Validate, ConvertToE0m3MatchesAnIndependentDerivationAndLoadsInTorch) {
  const std::string art = (dir_->path() / "art.pt").string();
  const auto r = run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", art});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("validated 2/2 records"), std::string::npos);
  EXPECT_EQ(testing::run_test_python("check_e0m3_artifact.py", {file("good.pt"), art}), 0);
  std::filesystem::remove(art);
}

// A record of several row blocks (its last partial) and a strided weight, with one thread and
// two: the same bytes, and the derivation's.
TEST_F(Validate, ConvertStreamsRowBlocksAndStridedWeightsLikeTheDerivation) {
  std::vector<std::vector<std::uint8_t>> bytes;
  for (const char* threads : {"1", "2"}) {
    const std::string art = (dir_->path() / fmt::format("blocks_{}.pt", threads)).string();
    const auto r = run_cli(
        {"convert", file("blocks.pt"), "--to", "e0m3-sfb", "-o", art, "--threads", threads});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::run_test_python("check_e0m3_artifact.py", {file("blocks.pt"), art}), 0);
    bytes.push_back(testing::read_bytes(art));
  }
  EXPECT_EQ(bytes[0], bytes[1]);
}

TEST_F(Validate, ConvertRefusesItsInputAndInvalidPacksAndLeavesNoFile) {
  auto r = run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", file("good.pt")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("overwrite input"), std::string::npos) << r.err;
  const std::string link = (dir_->path() / "link.pt").string();
  std::filesystem::create_symlink(file("good.pt"), link);
  EXPECT_EQ(run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", link}).exit_code, 2);
  std::filesystem::remove(link);
  const std::string out = (dir_->path() / "never.pt").string();
  r = run_cli({"convert", file("bad_rank.pt"), "--to", "e0m3-sfb", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", out, "--bits", "experts=4"});
  EXPECT_EQ(r.exit_code, 2);
  // Options of the checkpoint path are refused, not ignored.
  for (const char* opt : {"--job-size", "--max-shard-size"}) {
    r = run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", out, opt, "1MiB"});
    EXPECT_EQ(r.exit_code, 2) << opt;
    EXPECT_NE(r.err.find("--to e0m3-sfb takes only"), std::string::npos) << r.err;
  }
  r = run_cli({"convert", file("good.pt"), "--to", "e0m3-sfb", "-o", out, "--fold", "median"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fold must be none, mean or actnorm"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace qrepack
