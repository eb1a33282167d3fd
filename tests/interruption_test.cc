// Interrupted and failing runs: kill -9 at seeded random moments of convert (plain and
// --resume, FP8 and e0m3-sfb) must leave nothing at OUT (or, with --resume, a directory the
// rerun completes byte-identically), and the next run removes every temp file and lock the
// killed one left. A full disk (a small tmpfs, as root) exits 3 with nothing left.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "qrepack/io/output_txn.h"
#include "test_util.h"

extern char** environ;

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

// Starts the CLI with `args`, its output discarded; returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args) {
  std::vector<std::string> all = {QREPACK_CLI_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Runs `args` and kills it with SIGKILL after `delay` (if it is still running). True when it
// was killed before finishing.
bool run_and_kill(const std::vector<std::string>& args, std::chrono::microseconds delay) {
  const pid_t pid = spawn_cli(args);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status);
}

double seconds_of(const std::vector<std::string>& args) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run_cli(args).exit_code, 0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Entries qrepack's temp files, staging directories and locks would leave in `dir`.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.find(".qrepack-tmp-") != std::string::npos || n.ends_with(".qrepack-lock")) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

std::vector<std::string> files_of(const fs::path& dir) { return testing::list_dir(dir); }

class Interruption : public ::testing::Test {
 protected:
  void SetUp() override {
    src = (dir / "src").string();
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", src}).exit_code, 0);
  }
  std::vector<std::string> convert_args(const std::string& out, bool resume) const {
    std::vector<std::string> a = {"convert",          src,     "-o",        out, "--to", "int4-g64",
                                  "--max-shard-size", "200kB", "--threads", "1"};
    if (resume) a.push_back("--resume");
    return a;
  }
  testing::TempDir dir;
  std::string src;
};

TEST_F(Interruption, KillDuringConvertLeavesNothingAtOutAndTheRerunCleansUp) {
  const fs::path work = dir / "work";
  fs::create_directories(work);
  const std::string out = (work / "out").string();
  const double full = seconds_of(convert_args(out, false));
  const auto reference = files_of(out);
  fs::remove_all(out);
  SplitMix64 rng(12);
  int killed = 0;
  for (int i = 0; i < 8; ++i) {
    const auto delay =
        std::chrono::microseconds(static_cast<std::int64_t>(rng.unit() * full * 0.9e6));
    if (!run_and_kill(convert_args(out, false), delay)) {
      fs::remove_all(out);  // it finished first: nothing to check this round
      continue;
    }
    ++killed;
    // Killed before the commit: nothing at OUT. After it (during the final check-load): the
    // whole, final output.
    if (fs::exists(out)) {
      EXPECT_EQ(files_of(out), reference) << "after a kill at " << delay.count() << " us";
      fs::remove_all(out);
    }
  }
  EXPECT_GE(killed, 2);  // the rest finished first on a fast run
  ASSERT_EQ(run_cli(convert_args(out, false)).exit_code, 0);
  EXPECT_EQ(files_of(out), reference);
  EXPECT_EQ(leftovers(work), std::vector<std::string>{});
}

TEST_F(Interruption, KillDuringResumableConvertThenResumeIsByteIdentical) {
  const fs::path work = dir / "work";
  fs::create_directories(work);
  const std::string ref = (dir / "ref").string(), out = (work / "out").string();
  const double full = seconds_of(convert_args(ref, true));
  SplitMix64 rng(34);
  for (int i = 0; i < 6; ++i) {
    const auto delay =
        std::chrono::microseconds(static_cast<std::int64_t>(rng.unit() * full * 0.9e6));
    if (!run_and_kill(convert_args(out, true), delay)) break;  // finished
  }
  ASSERT_EQ(run_cli(convert_args(out, true)).exit_code, 0);
  ASSERT_EQ(files_of(out), files_of(ref));
  for (const auto& f : files_of(ref)) {
    if (f == "qrepack.json") continue;  // records the run's timing-free parameters only
    EXPECT_EQ(testing::read_bytes(fs::path(out) / f), testing::read_bytes(fs::path(ref) / f)) << f;
  }
  EXPECT_EQ(leftovers(work), std::vector<std::string>{});
}

TEST_F(Interruption, KillDuringE0m3ConvertLeavesNoArtifact) {
  const std::string pack = (dir / "pack.pt").string();
  ASSERT_EQ(run_cli({"fixture", "omega-pack", "--small", "-o", pack}).exit_code, 0);
  const fs::path work = dir / "work";
  fs::create_directories(work);
  const std::string out = (work / "art.pt").string();
  const std::vector<std::string> args = {"convert", pack, "--to", "e0m3-sfb", "-o", out};
  const double full = seconds_of(args);
  const auto reference = testing::read_bytes(out);
  fs::remove(out);
  SplitMix64 rng(56);
  for (int i = 0; i < 6; ++i) {
    const auto delay =
        std::chrono::microseconds(static_cast<std::int64_t>(rng.unit() * full * 0.9e6));
    // Killed before the rename: no artifact. After it: the whole artifact.
    if (run_and_kill(args, delay) && fs::exists(out)) {
      EXPECT_EQ(testing::read_bytes(out), reference) << "after a kill at " << delay.count();
    }
    fs::remove(out);
  }
  ASSERT_EQ(run_cli(args).exit_code, 0);
  EXPECT_EQ(testing::read_bytes(out), reference);
  EXPECT_EQ(leftovers(work), std::vector<std::string>{});
}

TEST_F(Interruption, TwoRunsOnOneOutputDoNotCollide) {
  const fs::path work = dir / "work";
  fs::create_directories(work);
  const std::string out = (work / "out").string();
  {
    auto held = OutputLock::acquire(out);  // as a live run holds it
    ASSERT_TRUE(held.ok()) << held.error().to_string();
    const auto r = run_cli(convert_args(out, false));
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("rule output.lock"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  EXPECT_EQ(run_cli(convert_args(out, false)).exit_code, 0);
  EXPECT_EQ(leftovers(work), std::vector<std::string>{});
}

TEST_F(Interruption, ANestedOutputGetsItsParentsAndNothingElse) {
  const fs::path out = dir / "runs" / "2026" / "out";
  ASSERT_EQ(run_cli(convert_args(out.string(), false)).exit_code, 0);
  EXPECT_EQ(files_of(out.parent_path()), std::vector<std::string>{"out"});
  EXPECT_TRUE(fs::exists(out / "qrepack.json"));
}

TEST_F(Interruption, AFullDiskExits3AndLeavesNothing) {
  const fs::path small = dir / "small";
  fs::create_directories(small);
  if (::geteuid() != 0 || ::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "needs root to mount a small tmpfs";
  }
  const std::string out = (small / "out").string();
  const auto r = run_cli(convert_args(out, false));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("No space left"), std::string::npos) << r.err;
  EXPECT_EQ(files_of(small), std::vector<std::string>{});
  const std::string pt = (small / "pack.pt").string();
  const auto r2 = run_cli({"fixture", "omega-pack", "-o", pt});
  EXPECT_EQ(r2.exit_code, 3) << r2.err;
  EXPECT_EQ(files_of(small), std::vector<std::string>{});
  ::umount(small.c_str());
}

}  // namespace
}  // namespace qrepack
