// End-to-end tests of the qrepack binary: exit codes, one-line errors on stderr, data on
// stdout, and no partial output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qrepack/io/checkpoint.h"
#include "safetensors_bytes.h"
#include "test_util.h"

namespace qrepack {
namespace {

using testing::run_cli;
using testing::TempDir;

std::size_t line_count(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture = (dir / "fx").string();
    const auto r = run_cli({"fixture", "moe-fp8", "-o", fixture});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  TempDir dir;
  std::string fixture;
};

// --version names the build (version, the commit and tree state, the compiler) and the SIMD
// targets; QREPACK_FORCE_TARGET pins one, changes no output byte, and an unknown name is a
// usage error.
TEST_F(Cli, VersionNamesTheBuildAndForcedTargetsChangeNoByte) {
  auto r = run_cli({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("qrepack 0.", 0), 0u) << r.out;
  for (const char* line :
       {"\ncommit ", "\ncompiler ", "\nSIMD targets compiled: ", "\nSIMD target dispatched: "}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << r.out;
  }
  EXPECT_NE(r.out.find("SCALAR"), std::string::npos) << r.out;
  ASSERT_EQ(run_cli({"convert", fixture, "-o", (dir / "best").string()}).exit_code, 0);
  ::setenv("QREPACK_FORCE_TARGET", "SCALAR", 1);
  r = run_cli({"--version"});
  EXPECT_NE(r.out.find("dispatched: SCALAR (pinned by QREPACK_FORCE_TARGET"), std::string::npos)
      << r.out;
  const auto scalar = run_cli({"convert", fixture, "-o", (dir / "scalar").string()});
  ::setenv("QREPACK_FORCE_TARGET", "NEON", 1);
  const auto bad = run_cli({"inspect", fixture});
  ::unsetenv("QREPACK_FORCE_TARGET");
  ASSERT_EQ(scalar.exit_code, 0) << scalar.err;
  EXPECT_EQ(testing::read_bytes(dir / "scalar" / "model.safetensors"),
            testing::read_bytes(dir / "best" / "model.safetensors"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("QREPACK_FORCE_TARGET=NEON: not a SIMD target"), std::string::npos)
      << bad.err;
  EXPECT_TRUE(bad.out.empty());
}

// The manual page comes from the tree --help prints: every option of every command's --help
// (and of fixture's kinds) is in it, with the command's section.
TEST_F(Cli, ManPageHoldsEveryOptionEachHelpShows) {
  const auto man = run_cli({"man"});
  ASSERT_EQ(man.exit_code, 0) << man.err;
  std::string page;  // roff's \- as plain hyphens
  for (std::size_t i = 0; i < man.out.size(); ++i) {
    if (man.out.compare(i, 2, "\\-") == 0) continue;
    page += man.out[i];
  }
  EXPECT_EQ(page.rfind(".TH QREPACK 1", 0), 0u);
  const std::vector<std::vector<std::string>> commands = {{"convert"},
                                                          {"merge"},
                                                          {"check-load"},
                                                          {"verify"},
                                                          {"eval"},
                                                          {"oracle"},
                                                          {"validate"},
                                                          {"check"},
                                                          {"inspect"},
                                                          {"reshard"},
                                                          {"fixture", "moe-fp8"},
                                                          {"fixture", "qwen3-moe"},
                                                          {"fixture", "omega-pack"}};
  std::size_t checked = 0;
  for (auto args : commands) {
    const std::string section = ".SS qrepack " + args[0] + (args.size() > 1 ? " " + args[1] : "");
    const std::size_t at = page.find(section + "\n");
    ASSERT_NE(at, std::string::npos) << section;
    const std::size_t end = page.find(".SS ", at + 1);
    const std::string body = page.substr(at, end == std::string::npos ? end : end - at);
    args.push_back("--help");
    const auto help = run_cli(args);
    ASSERT_EQ(help.exit_code, 0) << help.err;
    for (std::size_t p = help.out.find("  --"); p != std::string::npos;
         p = help.out.find("  --", p + 1)) {
      const std::size_t stop = help.out.find_first_of(" ,\n", p + 2);
      const std::string option = help.out.substr(p + 2, stop - p - 2);
      if (option == "--help") continue;
      EXPECT_NE(body.find("\\fB" + option + "\\fR"), std::string::npos) << section << " " << option;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60u);
  EXPECT_NE(page.find("Values: int4-row, int4-g16"), std::string::npos);
  EXPECT_NE(page.find("Values: tiny, bench, seed-bench, count, tiny-e8."), std::string::npos);
  const auto bad = run_cli({"completion", "fish"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("SHELL must be bash or zsh"), std::string::npos) << bad.err;
}

TEST_F(Cli, InspectPrintsTheTableTotalsAndLayout) {
  const auto r = run_cli({"inspect", fixture});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  EXPECT_NE(r.out.find("NAME"), std::string::npos);
  EXPECT_NE(r.out.find("model.layers.3.mlp.experts.5.gate_proj.weight"), std::string::npos);
  EXPECT_NE(r.out.find("layout: FP8 E4M3, 128x128 block scales"), std::string::npos);
  EXPECT_NE(r.out.find("FP8 tensors: 132, scale sidecars: 132, other tensors: 55"),
            std::string::npos);
}

TEST_F(Cli, InspectJsonAndFilter) {
  const auto r = run_cli({"inspect", fixture, "--json", "--filter", "experts\\.5\\."});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["family"], "fp8_block");
  EXPECT_EQ(j["layout"]["block"], nlohmann::json::array({128, 128}));
  // 2 MoE layers and the MTP layer x 3 projections x (weight + scale)
  EXPECT_EQ(j["total_tensors"], 18);
  for (const auto& t : j["tensors"]) {
    EXPECT_NE(t["name"].get<std::string>().find("experts.5."), std::string::npos);
  }
  EXPECT_EQ(j["totals"]["F32"]["tensors"], 9);
}

TEST_F(Cli, InspectAcceptsTheIndexAndOneShard) {
  EXPECT_EQ(run_cli({"inspect", fixture + "/model.safetensors.index.json"}).exit_code, 0);
  const auto r = run_cli({"inspect", fixture + "/model-00001-of-00004.safetensors"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("in 1 shard(s)"), std::string::npos);
}

TEST_F(Cli, BadFilesGetOneLineAndExitCode2) {
  struct Case {
    const char* file;
    std::vector<std::uint8_t> bytes;
    const char* expect;  // a fragment of the message
  };
  const std::string ok_header = R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  const std::vector<Case> cases = {
      {"truncated.safetensors", testing::safetensors_bytes(ok_header, 2), "truncated"},
      {"beyond.safetensors", {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'}, "past the end"},
      {"badjson.safetensors", testing::safetensors_bytes("{\"t\":", 0), "invalid JSON"},
      {"dup.safetensors",
       testing::safetensors_bytes(
           R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
           4),
       "duplicate key"},
      {"dtype.safetensors",
       testing::safetensors_bytes(R"({"t":{"dtype":"Q4","shape":[4],"data_offsets":[0,4]}})", 4),
       "unknown dtype"},
      {"size.safetensors",
       testing::safetensors_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,4]}})", 4),
       "needs 16"},
      {"overlap.safetensors",
       testing::safetensors_bytes(
           R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"t":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
           6),
       "overlaps"},
      {"gap.safetensors",
       testing::safetensors_bytes(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"t":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
           6),
       "unclaimed"},
      {"trailing.safetensors", testing::safetensors_bytes(ok_header, 5), "after the last tensor"},
      {"meta.safetensors", testing::safetensors_bytes(R"({"__metadata__":{"a":[1]}})", 0),
       "not a string"},
  };
  for (const Case& c : cases) {
    const std::string path = (dir / c.file).string();
    testing::write_bytes(path, c.bytes);
    const auto r = run_cli({"inspect", path});
    EXPECT_EQ(r.exit_code, 2) << c.file << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << c.file << ": " << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << c.file << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.file << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.file;
  }
}

TEST_F(Cli, UsageErrorsExit2) {
  EXPECT_EQ(run_cli({"inspect", (dir / "nope").string()}).exit_code, 2);
  EXPECT_EQ(run_cli({"inspect", fixture, "--filter", "["}).exit_code, 2);
  EXPECT_EQ(run_cli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(run_cli({}).exit_code, 2);
  EXPECT_EQ(
      run_cli({"fixture", "moe-fp8", "-o", (dir / "x").string(), "--preset", "huge"}).exit_code, 2);
  const auto help = run_cli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("inspect"), std::string::npos);
}

TEST_F(Cli, ReshardRoundTripIsByteIdentical) {
  const std::string out = (dir / "re").string();
  const auto r = run_cli({"reshard", fixture, "-o", out, "--max-shard-size", "100kB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("verified: 319/319"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out + "/config.json"));
  auto a = Checkpoint::open(fixture);
  auto b = Checkpoint::open(out);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(b->shards().size(), a->shards().size());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : a->tensors()) {
    const auto u = b->find(t.entry->name);
    ASSERT_TRUE(u.has_value());
    std::vector<std::uint8_t> x(t.entry->byte_size()), y(u->entry->byte_size());
    ASSERT_TRUE(a->read(t, 0, x).ok());
    ASSERT_TRUE(b->read(*u, 0, y).ok());
    EXPECT_EQ(x, y) << t.entry->name;
  }
  EXPECT_EQ(testing::read_bytes(fixture + "/config.json"),
            testing::read_bytes(out + "/config.json"));
}

TEST_F(Cli, ReshardRefusesToOverwriteItsInputOrAnotherCheckpoint) {
  const auto before = testing::list_dir(fixture);
  auto r = run_cli({"reshard", fixture, "-o", fixture});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("overwrite input"), std::string::npos) << r.err;
  EXPECT_EQ(testing::list_dir(fixture), before);
  const std::string other = (dir / "other").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", other}).exit_code, 0);
  const auto other_before = testing::list_dir(other);
  r = run_cli({"reshard", fixture, "-o", other});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rule output.fresh_dir"), std::string::npos) << r.err;
  EXPECT_EQ(testing::list_dir(other), other_before);
}

TEST_F(Cli, ReshardOfABadSourceLeavesNoOutput) {
  const std::string bad = (dir / "bad").string();
  std::filesystem::create_directories(bad);
  testing::write_bytes(
      bad + "/model.safetensors",
      testing::safetensors_bytes(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3));
  const std::string out = (dir / "out").string();
  const auto r = run_cli({"reshard", bad, "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out) && !testing::list_dir(out).empty());
}

}  // namespace
}  // namespace qrepack
