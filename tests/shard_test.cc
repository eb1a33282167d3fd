// convert --shard I/N + merge: N worker processes started the ways docs/scale-out.md shows
// (Slurm array index, Kubernetes completion index, GNU parallel), then merge; the directory
// equals a single-process run byte for byte. And merge's refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const std::string kExamples = std::string(QREPACK_SOURCE_DIR) + "/docs/examples";

class Shard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--fused-experts", "-o", src()}).exit_code, 0);
    const auto r =
        run_cli({"convert", src(), "-o", single(), "--to", "int4-g32", "--max-shard-size", "60kB"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_GE(testing::list_dir(single()).size(), 8u) << "want several output shards";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src() { return (*dir_ / "src").string(); }
  static std::string single() { return (*dir_ / "single").string(); }
  static std::string path(const std::string& n) { return (*dir_ / n).string(); }
  static int sh(const std::string& script) {
    const std::string cmd =
        "QREPACK='" + std::string(QREPACK_CLI_PATH) + "' bash -c '" + script + "' > /dev/null 2>&1";
    return std::system(cmd.c_str());
  }
  static void expect_same_as_single(const std::string& out) {
    EXPECT_EQ(testing::list_dir(out), testing::list_dir(single()));
    for (const auto& f : testing::list_dir(single())) {
      EXPECT_EQ(testing::read_bytes(fs::path(out) / f), testing::read_bytes(fs::path(single()) / f))
          << f;
    }
  }
  static testing::TempDir* dir_;
};
testing::TempDir* Shard::dir_ = nullptr;

const std::string kArgs = " --to int4-g32 --max-shard-size 60kB";

TEST_F(Shard, SlurmArrayWorkersThenMergeEqualASingleRun) {
  const std::string out = path("slurm");
  std::string script;
  for (int i = 0; i < 4; ++i) {
    script += "SLURM_ARRAY_TASK_ID=" + std::to_string(i) + " " + kExamples + "/qrepack-worker.sh " +
              src() + " " + out + " 4" + kArgs + " & ";
  }
  script += "wait";
  ASSERT_EQ(sh(script), 0);
  const auto m = run_cli({"merge", out});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  expect_same_as_single(out);
}

TEST_F(Shard, KubernetesIndexedJobWorkersThenMergeEqualASingleRun) {
  const std::string out = path("k8s");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(sh("JOB_COMPLETION_INDEX=" + std::to_string(i) + " " + kExamples +
                 "/qrepack-worker.sh " + src() + " " + out + " 3" + kArgs),
              0);
  }
  ASSERT_EQ(run_cli({"merge", out}).exit_code, 0);
  expect_same_as_single(out);
  // The example Job uses the index Kubernetes sets and runs the same worker script.
  std::ifstream yaml(kExamples + "/k8s-indexed-job.yaml");
  std::stringstream text;
  text << yaml.rdbuf();
  EXPECT_NE(text.str().find("completionMode: Indexed"), std::string::npos);
  EXPECT_NE(text.str().find("qrepack-worker.sh"), std::string::npos);
}

TEST_F(Shard, GnuParallelOnOneMachineEqualsASingleRun) {
  const std::string out = path("parallel");
  ASSERT_EQ(sh(kExamples + "/parallel-convert.sh " + src() + " " + out + " 3" + kArgs), 0);
  expect_same_as_single(out);
}

TEST_F(Shard, MoreWorkersThanShardsStillMerges) {
  const std::string out = path("many");
  for (int i = 0; i < 40; ++i) {
    const auto r = run_cli({"convert", src(), "-o", out, "--to", "int4-g32", "--max-shard-size",
                            "60kB", "--shard", std::to_string(i) + "/40"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_EQ(run_cli({"merge", out}).exit_code, 0);
  expect_same_as_single(out);
}

TEST_F(Shard, MergeRefusesIncompleteInconsistentOrDamagedParts) {
  const auto worker = [&](const std::string& out, int i, const std::string& to) {
    return run_cli({"convert", src(), "-o", out, "--to", to, "--max-shard-size", "60kB", "--shard",
                    std::to_string(i) + "/2"});
  };
  // A missing part.
  const std::string a = path("missing");
  ASSERT_EQ(worker(a, 0, "int4-g32").exit_code, 0);
  auto r = run_cli({"merge", a});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--shard 1/2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(fs::path(a) / "qrepack.json"));
  // Parts of two different commands.
  ASSERT_EQ(worker(a, 1, "int4-g64").exit_code, 0);
  r = run_cli({"merge", a});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("differs from part 0"), std::string::npos) << r.err;
  // A shard damaged after its worker recorded it.
  const std::string b = path("damaged");
  ASSERT_EQ(worker(b, 0, "int4-g32").exit_code, 0);
  ASSERT_EQ(worker(b, 1, "int4-g32").exit_code, 0);
  fs::path shard;
  for (const auto& f : testing::list_dir(b)) {
    if (f.ends_with(".safetensors")) shard = fs::path(b) / f;
  }
  ASSERT_FALSE(shard.empty());
  auto bytes = testing::read_bytes(shard);
  bytes[bytes.size() - 1] ^= 1;
  testing::write_bytes(shard, bytes);
  r = run_cli({"merge", b});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("checksum differs"), std::string::npos) << r.err;
  // Nothing to merge; a malformed --shard.
  EXPECT_EQ(run_cli({"merge", path("nothing-here")}).exit_code, 2);
  for (const char* bad : {"2/2", "1", "a/b", "0/0"}) {
    r = run_cli({"convert", src(), "-o", path("x"), "--shard", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--shard"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace qrepack
