// Every target's run kinds give the same bytes: a single run, three `--shard I/N` workers
// completed by `merge`, and a `--resume` run killed with SIGKILL again and again at chosen jobs
// (QREPACK_FAULT_KILL_AFTER_JOBS) and resumed each time. A resume with other flags is refused
// naming them.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::run_cli;
using testing::TempDir;

struct TargetCase {
  const char* fixture;
  const char* target;
  bool from_inkling_container = false;  ///< the dense overlay converts colibri-inkling's output
  std::vector<std::string> flags = {};  ///< besides --target
  const char* preset = nullptr;         ///< the fixture's --preset
};

std::ostream& operator<<(std::ostream& os, const TargetCase& c) { return os << c.target; }

class TargetRuns : public ::testing::TestWithParam<TargetCase> {
 protected:
  void SetUp() override {
    src = (dir / "src").string();
    std::vector<std::string> fixture = {"fixture", GetParam().fixture, "-o", src};
    if (GetParam().preset) fixture.insert(fixture.end(), {"--preset", GetParam().preset});
    ASSERT_EQ(run_cli(fixture).exit_code, 0);
    if (GetParam().from_inkling_container) {
      const std::string conv = (dir / "inkling").string();
      ASSERT_EQ(run_cli({"convert", src, "-o", conv}).exit_code, 0);
      src = conv;
    }
    ref = (dir / "ref").string();
    const auto r = run_cli(convert(ref, {}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::vector<std::string> convert(const std::string& out, std::vector<std::string> extra) const {
    std::vector<std::string> a = {"convert", src, "-o", out, "--target", GetParam().target};
    a.insert(a.end(), GetParam().flags.begin(), GetParam().flags.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  // Every file of `out` (state files and locks included) equals ref's, byte for byte.
  void expect_same_as_ref(const std::string& out) const {
    ASSERT_EQ(testing::list_dir(out), testing::list_dir(ref)) << out;
    for (const auto& f : testing::list_dir(ref)) {
      EXPECT_EQ(read_bytes(fs::path(out) / f), read_bytes(fs::path(ref) / f)) << out << "/" << f;
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir.path(), ec)) {
      EXPECT_EQ(e.path().filename().string().find(".qrepack-"), std::string::npos) << e.path();
    }
  }

  testing::TempDir dir;
  std::string src, ref;
};

TEST_P(TargetRuns, ThreeShardWorkersAndMergeEqualOneRun) {
  const std::string out = (dir / "sharded").string();
  for (int i = 0; i < 3; ++i) {
    const auto r = run_cli(convert(out, {"--shard", std::to_string(i) + "/3", "--threads", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("part " + std::to_string(i) + "/3"), std::string::npos) << r.out;
  }
  const auto m = run_cli({"merge", out});
  ASSERT_EQ(m.exit_code, 0) << m.err << m.out;
  EXPECT_NE(m.out.find("merged 3 parts"), std::string::npos) << m.out;
  expect_same_as_ref(out);
}

// SIGKILL once the first file is recorded, then after 1, 2, 4, ... jobs (one thread), each run
// resuming the one before, then a run to the end.
TEST_P(TargetRuns, KilledAgainAndAgainThenResumedEqualsOneRun) {
  const std::string out = (dir / "resumed").string();
  const std::vector<std::string> args =
      convert(out, {"--resume", "--job-size", "2KiB", "--threads", "1"});
  // The files the executor writes: a container's tensor files or raw files, the GLM layout's
  // shards.
  const auto manifest = testing::read_json(fs::path(ref) / "qrepack.json");
  std::size_t tensor_files = 0;
  if (manifest.contains("files")) {
    for (const auto& f : manifest["files"]) {
      tensor_files += f.contains("tensors") || f.contains("bytes");  // bytes: raw files
    }
  } else {
    for (const auto& f : testing::list_dir(ref)) tensor_files += f.ends_with(".safetensors");
  }
  if (tensor_files >= 2) {  // killed right after the first file: the rerun keeps it
    ::setenv("QREPACK_FAULT_KILL_AFTER_FILES", "1", 1);
    const auto r = run_cli(args);
    ::unsetenv("QREPACK_FAULT_KILL_AFTER_FILES");
    ASSERT_GE(r.exit_code, 128) << r.err;
    const auto progress = testing::read_json(fs::path(out) / ".qrepack-progress.json");
    EXPECT_EQ(progress["shards"].size(), 1u) << progress.dump();
  }
  std::size_t kills = 0;
  for (std::uint64_t k = 1; k <= (1u << 14); k *= 2) {
    ::setenv("QREPACK_FAULT_KILL_AFTER_JOBS", std::to_string(k).c_str(), 1);
    const auto r = run_cli(args);
    ::unsetenv("QREPACK_FAULT_KILL_AFTER_JOBS");
    if (r.exit_code == 0) break;  // it got to the end before job k
    ASSERT_GE(r.exit_code, 128) << "killed, not failed: " << r.err;
    ++kills;
  }
  if (tensor_files >= 1) EXPECT_GE(kills, 1u);
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  if (tensor_files >= 2 && kills > 0) {
    EXPECT_EQ(r.out.find("resume: 0 "), std::string::npos) << r.out;
  }
  expect_same_as_ref(out);
}

const TargetCase kCases[] = {
    {"moe-fp8", "colibri-glm", false, {"--to", "int4-g64", "--max-shard-size", "60kB"}},
    {"moe-fp8",
     "colibri-glm",
     false,
     {"--bits", "experts=e8", "--max-shard-size", "60kB"},
     "tiny-e8"},
    {"qwen36", "colibri-qwen36"},
    {"qwen3", "colibri-qwen3"},
    {"llama", "colibri-llama"},
    {"olmoe", "colibri-olmoe"},
    {"glm53", "colibri-glm53"},
    {"qwen38-fp8", "colibri-qwen38-int4"},
    {"qwen38-fp8", "colibri-qwen38-experts-int4g64"},
    {"inkling", "colibri-inkling"},
    {"inkling", "colibri-inkling-dense", true},
    {"kimi-k3", "colibri-kimi-k3"},
    {"olmoe-gguf", "colibri-olmoe", false, {"--norm-topk-prob"}},  // a GGUF source
    {"gemma4", "colibri-gemma4"},  // raw files (layer-NN.g4ex) from a GGUF
};

INSTANTIATE_TEST_SUITE_P(EveryContainer, TargetRuns, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string n = info.param.target;
                           for (const auto& f : info.param.flags) {
                             if (f.find('=') != std::string::npos) n += "_" + f;
                           }
                           if (std::string(info.param.fixture) == "olmoe-gguf") n += "_gguf";
                           for (char& ch : n) ch = std::isalnum(ch) ? ch : '_';
                           return n;
                         });

TEST(TargetResume, OtherFlagsOrAChangedSourceAreRefusedNamingThem) {
  TempDir dir;
  const std::string src = (dir / "src").string(), out = (dir / "out").string();
  ASSERT_EQ(run_cli({"fixture", "qwen36", "-o", src}).exit_code, 0);
  ::setenv("QREPACK_FAULT_KILL_AFTER_JOBS", "3", 1);
  const auto killed = run_cli({"convert", src, "-o", out, "--resume", "--job-size", "2KiB"});
  ::unsetenv("QREPACK_FAULT_KILL_AFTER_JOBS");
  ASSERT_GE(killed.exit_code, 128);
  auto r = run_cli({"convert", src, "-o", out, "--resume", "--to", "int8-row"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("resume.same_parameters"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"to\":\"int8-row\""), std::string::npos) << r.err;
  // The same layout rewritten with other values (newer files): refused, naming a file.
  const std::string fresh = (dir / "fresh").string();
  ASSERT_EQ(run_cli({"fixture", "qwen36", "-o", fresh, "--seed", "7"}).exit_code, 0);
  for (const auto& f : testing::list_dir(fresh)) {
    fs::copy_file(fs::path(fresh) / f, fs::path(src) / f, fs::copy_options::overwrite_existing);
  }
  r = run_cli({"convert", src, "-o", out, "--resume", "--job-size", "2KiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("resume.same_source"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("source file \"model"), std::string::npos) << r.err;
  // A plain run over what a resumable run left is refused: it would mix two runs.
  const std::string plain = (dir / "plain").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", plain}).exit_code, 0);
  r = run_cli({"convert", src, "-o", plain, "--resume"});
  EXPECT_EQ(r.exit_code, 0) << r.err;  // finished with the same parameters: nothing to do
  EXPECT_NE(r.out.find("already complete"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qrepack
