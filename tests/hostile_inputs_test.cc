// Hostile files other than pickles, each a class seen in the wild: a config.json at the caps, a
// FIFO or a symlink loop where a file should be, ZIP64 offsets near 2^64, valid-but-extreme
// safetensors headers, names that a backtracking regex engine recursed on, and hand-edited
// state files. Each gets one line, its rule and exit 2, through the CLI.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "qrepack/core/name_pattern.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt_writer.h"
#include "safetensors_bytes.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

void expect_refused(const testing::CliResult& r, const std::string& rule) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

class HostileInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture = (dir / "fx").string();
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", fixture}).exit_code, 0);
  }
  testing::TempDir dir;
  std::string fixture;
};

TEST_F(HostileInputs, AConfigAtTheDimensionCapsIsRefusedBeforeAnyNameIsListed) {
  auto cfg = nlohmann::json::parse(testing::read_bytes(fs::path(fixture) / "config.json"));
  cfg["num_hidden_layers"] = 1 << 24;
  cfg["n_routed_experts"] = 1 << 24;
  testing::write_text(fs::path(fixture) / "config.json", cfg.dump());
  expect_refused(run_cli({"convert", fixture, "-o", (dir / "o").string()}), "config.max_weights");
  expect_refused(run_cli({"check-load", fixture}), "config.max_weights");
  EXPECT_FALSE(fs::exists(dir / "o"));
}

TEST_F(HostileInputs, AFifoIsNeverOpenedForReading) {
  const std::string fifo_st = (dir / "x.safetensors").string(), fifo_pt = (dir / "x.pt").string();
  ASSERT_EQ(::mkfifo(fifo_st.c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo(fifo_pt.c_str(), 0644), 0);
  expect_refused(run_cli({"inspect", fifo_st}), "input.regular_file");
  expect_refused(run_cli({"validate", fifo_pt}), "input.regular_file");
  // A FIFO named config.json: an error, not "no config" and not a hang.
  fs::remove(fs::path(fixture) / "config.json");
  ASSERT_EQ(::mkfifo((fs::path(fixture) / "config.json").c_str(), 0644), 0);
  expect_refused(run_cli({"check-load", fixture}), "input.regular_file");
}

TEST_F(HostileInputs, SymlinkLoopsAreErrorsNotExceptions) {
  const auto loop_dir = dir / "loops";
  fs::create_directories(loop_dir);
  fs::create_symlink("model.safetensors", loop_dir / "model.safetensors");
  auto r = run_cli({"inspect", loop_dir.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  fs::remove(loop_dir / "model.safetensors");
  fs::create_symlink("model.safetensors.index.json", loop_dir / "model.safetensors.index.json");
  r = run_cli({"inspect", loop_dir.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  fs::remove(fs::path(fixture) / "config.json");
  fs::create_symlink("config.json", fs::path(fixture) / "config.json");
  r = run_cli({"check-load", fixture});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(HostileInputs, Zip64OffsetsNearTwoToThe64AreAFormatError) {
  MemorySink sink;
  const std::vector<std::uint8_t> pickle = {0x80, 2, '}', '.'};
  ASSERT_TRUE(write_torch_zip(sink, pickle, {}).ok());
  auto bytes = sink.bytes();
  // The ZIP64 locator sits just before the 22-byte classic end record; its offset field is
  // at +8.
  const std::size_t locator = bytes.size() - 22 - 20;
  ASSERT_EQ(bytes[locator], 'P');
  for (int i = 0; i < 8; ++i) bytes[locator + 8 + i] = i == 0 ? 0xF0 : 0xFF;
  testing::write_bytes(dir / "wrap.pt", bytes);
  expect_refused(run_cli({"validate", (dir / "wrap.pt").string()}), "zip.structure");
}

TEST_F(HostileInputs, ValidButExtremeSafetensorsHeadersMeetNamedCaps) {
  std::string many = "{";
  for (int i = 0; i <= 262'144; ++i) {
    many += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                        i ? "," : "", i);
  }
  many += "}";
  testing::write_bytes(dir / "many.safetensors", testing::safetensors_bytes(many, 0));
  expect_refused(run_cli({"inspect", (dir / "many.safetensors").string()}),
                 "safetensors.max_tensors");
  const std::string meta = "{\"__metadata__\":{\"k\":\"" + std::string(17u << 20, 'x') + "\"}}";
  testing::write_bytes(dir / "meta.safetensors", testing::safetensors_bytes(meta, 0));
  expect_refused(run_cli({"inspect", (dir / "meta.safetensors").string()}),
                 "safetensors.max_metadata_bytes");
}

TEST_F(HostileInputs, FusedExpertsCannotMultiplyIntoUnboundedWeights) {
  // 2^40 experts of an empty [2, 0] slice: zero data bytes, 2^41 weights if unfused blindly.
  const std::string header =
      R"({"model.layers.0.mlp.experts.gate_up_proj":{"dtype":"BF16","shape":[1099511627776,2,0],)"
      R"("data_offsets":[0,0]}})";
  fs::create_directories(dir / "fused");
  testing::write_bytes(dir / "fused" / "model.safetensors", testing::safetensors_bytes(header, 0));
  expect_refused(run_cli({"convert", (dir / "fused").string(), "-o", (dir / "o").string(),
                          "--no-coverage-gate"}),
                 "experts.max_weights");
  EXPECT_FALSE(fs::exists(dir / "o"));
}

TEST(NamePatterns, LongNamesCostLinearTimeAndPythonSyntaxWorks) {
  auto p = NamePattern::compile("(a|aa)*(b|c)$", "--select");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->search(std::string(1 << 20, 'a')));  // std::regex recursed to SIGSEGV here
  EXPECT_TRUE(p->search(std::string(1 << 20, 'a') + "c"));
  auto ci = NamePattern::compile("(?i)MLP\\.GATE_PROJ", "--select");
  ASSERT_TRUE(ci.ok());
  EXPECT_TRUE(ci->search("model.layers.3.mlp.gate_proj.weight"));
  auto bad = NamePattern::compile("(?!x)y", "--select");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind(), ErrorKind::kUsage);
}

TEST_F(HostileInputs, SelectTakesPythonStylePatterns) {
  const auto r = run_cli({"inspect", fixture, "--filter", "(?i)LAYERS\\.0\\.MLP\\.GATE_PROJ"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << r.out;
}

TEST_F(HostileInputs, HandEditedStateFilesAreOneLineNotAnAbort) {
  const std::string out = (dir / "out").string();
  fs::create_directories(out);
  testing::write_text(fs::path(out) / ".qrepack-progress.json",
                      R"({"parameters": {"to": 4}, "fingerprint": "x", "shards": {}})");
  expect_refused(run_cli({"convert", fixture, "-o", out, "--resume"}), "run_state.schema");

  const std::string parts = (dir / "parts").string();
  fs::create_directories(parts);
  testing::write_text(fs::path(parts) / ".qrepack-part-99999999999999999999-of-1.json", "{}");
  testing::write_text(fs::path(parts) / ".qrepack-part-0-of-1.json",
                      R"({"parameters": {"to": "int4-g128", "bits": {"experts": "four"}}})");
  expect_refused(run_cli({"merge", parts}), "run_state.schema");
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// A NUL (or any control character) inside a tensor name would load as a shorter C string in
// the engines, shadowing a real tensor: refused by every reader that yields names.
TEST_F(HostileInputs, ControlCharactersInNamesAreRefusedByEveryReader) {
  const std::string header =
      R"({"model.norm.weight\u0000x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  testing::write_bytes(dir / "nul.safetensors", testing::safetensors_bytes(header, 4));
  expect_refused(run_cli({"inspect", (dir / "nul.safetensors").string()}), "name.control_char");
  // An index naming a tensor with a control character (U+0085, a C1 control, here).
  const fs::path idx = fs::path(fixture) / "model.safetensors.index.json";
  ASSERT_TRUE(fs::exists(idx));
  auto j = nlohmann::json::parse(testing::read_bytes(idx));
  const std::string first = j["weight_map"].begin().key();
  j["weight_map"][first + "\u0085"] = j["weight_map"][first];
  testing::write_text(idx, j.dump());
  expect_refused(run_cli({"inspect", fixture}), "name.control_char");
  // An Omega pack whose record key holds a newline.
  const std::string pt = (dir / "pack.pt").string();
  ASSERT_TRUE(
      write_torch_file(pt, pt_dict({{"__meta__", pt_dict({})}, {"blocks.0\nq", pt_dict({})}}))
          .ok());
  expect_refused(run_cli({"validate", pt}), "name.control_char");
}

}  // namespace
}  // namespace qrepack
