// Replays the fuzz regression corpus (fuzz/regressions/<target>/: every finding, plus the
// hand-made files of each class the reliability work fixed) through the CLI, in the form each
// fuzz target feeds its reader: whatever the file, qrepack answers with exit 0, 1 or 2 and at
// most one line on stderr, never a crash, a sanitizer report or a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "index_dir.h"
#include "pickle_input.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

std::vector<fs::path> corpus(const std::string& target) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e :
       fs::directory_iterator(fs::path(QREPACK_SOURCE_DIR) / "fuzz" / "regressions" / target, ec)) {
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void expect_clean(const testing::CliResult& r, const fs::path& input) {
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
      << input << " exit " << r.exit_code << "\n"
      << r.err;
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << input << "\n" << r.err;
}

class FuzzRegressions : public ::testing::Test {
 protected:
  testing::TempDir dir;
};

TEST_F(FuzzRegressions, PicklesAndPacksThroughValidate) {
  for (const char* target : {"pickle_fuzz", "omega_pack_fuzz"}) {
    for (const fs::path& f : corpus(target)) {
      const auto pt = fuzz::pickle_input_to_pt(testing::read_bytes(f));
      if (pt.empty()) continue;  // too short to name its storages: the target skips it too
      testing::write_bytes(dir / "x.pt", pt);
      expect_clean(run_cli({"validate", (dir / "x.pt").string()}), f);
    }
  }
}

TEST_F(FuzzRegressions, ZipsAndPtFilesThroughValidate) {
  for (const char* target : {"zip_fuzz", "pt_fuzz"}) {
    for (const fs::path& f : corpus(target)) {
      fs::copy_file(f, dir / "x.pt", fs::copy_options::overwrite_existing);
      expect_clean(run_cli({"validate", (dir / "x.pt").string()}), f);
    }
  }
}

TEST_F(FuzzRegressions, SafetensorsThroughInspect) {
  for (const fs::path& f : corpus("safetensors_fuzz")) {
    fs::copy_file(f, dir / "x.safetensors", fs::copy_options::overwrite_existing);
    expect_clean(run_cli({"inspect", (dir / "x.safetensors").string()}), f);
  }
}

TEST_F(FuzzRegressions, GgufThroughInspectAndConvert) {
  for (const fs::path& f : corpus("gguf_fuzz")) {
    fs::copy_file(f, dir / "x.gguf", fs::copy_options::overwrite_existing);
    expect_clean(run_cli({"inspect", (dir / "x.gguf").string()}), f);
    expect_clean(
        run_cli({"convert", (dir / "x.gguf").string(), "-o", (dir / "out").string(), "--dry-run"}),
        f);
  }
}

TEST_F(FuzzRegressions, IndexesThroughInspect) {
  fs::create_directories(dir / "ck");
  fuzz::make_index_fuzz_dir((dir / "ck").string());
  for (const fs::path& f : corpus("index_fuzz")) {
    fs::copy_file(f, dir / "ck" / "model.safetensors.index.json",
                  fs::copy_options::overwrite_existing);
    expect_clean(run_cli({"inspect", (dir / "ck").string()}), f);
  }
}

TEST_F(FuzzRegressions, ConfigsThroughCheckLoad) {
  const std::string ck = (dir / "ck").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", ck}).exit_code, 0);
  for (const fs::path& f : corpus("config_fuzz")) {
    fs::copy_file(f, fs::path(ck) / "config.json", fs::copy_options::overwrite_existing);
    expect_clean(run_cli({"check-load", ck}), f);
  }
}

}  // namespace
}  // namespace qrepack
