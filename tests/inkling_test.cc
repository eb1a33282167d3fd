// The Inkling targets end to end through the CLI: the release-layout fixture converts into the
// colibri-inkling container and that into the dense overlay, every output byte equal to an
// independent numpy derivation of the upstream converters' rules (tests/python/inkling.py),
// check-load passing as inkling.c loads them; bad input refused before any output, naming the
// tensor and the rule; the bytes independent of the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;

// The fixture and its colibri-inkling container, made once per directory.
struct Converted {
  std::string src, container;
};

Converted convert_fixture(const TempDir& d) {
  Converted c{testing::write_fixture(d, "inkling"), (d / "container").string()};
  if (fs::exists(c.container)) return c;
  const auto r = run_cli({"convert", c.src, "-o", c.container});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("PLAN: target colibri-inkling "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shards with nothing kept"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  return c;
}

TEST(InklingTarget, ContainerMatchesTheIndependentDerivation) {
  TempDir d;
  const Converted c = convert_fixture(d);
  EXPECT_EQ(run_test_python("inkling.py", {"int4", c.src, c.container}), 0);
  // The vision/audio-only shard writes no file (upstream: a 0-byte one inkling.c refuses).
  EXPECT_FALSE(fs::exists(fs::path(c.container) / "out-00003.safetensors"));
  const auto m = read_json(fs::path(c.container) / "qrepack.json");
  EXPECT_EQ(m["target"]["name"], "colibri-inkling");
  EXPECT_EQ(run_cli({"check-load", c.container}).exit_code, 0);
  // int8 experts.
  const std::string i8 = (d / "i8").string();
  const auto r = run_cli({"convert", c.src, "-o", i8, "--bits", "experts=8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("routed experts int8 per row"), std::string::npos) << r.out;
  EXPECT_EQ(run_test_python("inkling.py", {"int4", c.src, i8, "--bits", "8"}), 0);
}

TEST(InklingTarget, DenseOverlayMatchesTheIndependentDerivation) {
  TempDir d;
  const Converted c = convert_fixture(d);
  for (const bool attn4 : {false, true}) {
    const std::string out = (d / (attn4 ? "dense-a4" : "dense")).string();
    std::vector<std::string> args{"convert", c.container, "-o",
                                  out,       "--target",  "colibri-inkling-dense"};
    if (attn4) args.insert(args.end(), {"--bits", "attn=4"});
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("int4-g64"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
    std::vector<std::string> check{"dense", c.container, out};
    if (attn4) check.insert(check.end(), {"--attn-bits", "4"});
    EXPECT_EQ(run_test_python("inkling.py", check), 0) << out;
  }
  // --bits attn is the overlay's alone.
  const auto wrong = run_cli({"convert", c.src, "-o", (d / "x").string(), "--bits", "attn=4"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("rule target.scheme"), std::string::npos) << wrong.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

TEST(InklingTarget, OutputDoesNotDependOnThreadsOrJobSize) {
  TempDir d;
  const Converted c = convert_fixture(d);
  for (const char* target : {"colibri-inkling", "colibri-inkling-dense"}) {
    const std::string in = std::string(target) == "colibri-inkling" ? c.src : c.container;
    const std::string a = (d / (std::string(target) + "-1")).string();
    const std::string b = (d / (std::string(target) + "-2")).string();
    ASSERT_EQ(run_cli({"convert", in, "-o", a, "--target", target, "--threads", "1"}).exit_code, 0);
    ASSERT_EQ(
        run_cli({"convert", in, "-o", b, "--target", target, "--threads", "2", "--job-size", "1kB"})
            .exit_code,
        0);
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(a)) {
      if (e.path().filename() == "qrepack.json") continue;
      ++files;
      EXPECT_EQ(testing::read_bytes(e.path()),
                testing::read_bytes(fs::path(b) / e.path().filename()))
          << e.path();
    }
    EXPECT_GT(files, 0u);
  }
}

// One refusal: exit 2, the message naming `tensor` and `rule`, no output directory.
void expect_refused(const std::vector<std::string>& args, const std::string& out,
                    const std::string& tensor, const std::string& rule) {
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(tensor), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(out)) << out;
}

TEST(InklingTarget, BadInputIsRefusedBeforeAnyOutput) {
  TempDir d;
  // A tensor no rule names (an extra shard the converter would read).
  const std::string base = (d / "base").string();
  ASSERT_EQ(run_test_python("inkling.py", {"make", base}), 0);
  const std::string out = (d / "out").string();
  ASSERT_EQ(run_cli({"convert", base, "-o", out}).exit_code, 0);  // the base converts
  fs::remove_all(out);
  {
    const std::string header =
        R"({"model.llm.layers.1.mlp.stray.weight":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})";
    std::vector<std::uint8_t> bytes(8);
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(header.size() >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + 8, 0);
    testing::write_bytes(fs::path(base) / "model-00002-of-00002.safetensors", bytes);
    expect_refused({"convert", base, "-o", out}, out, "model.llm.layers.1.mlp.stray.weight",
                   "target.unknown_tensor");
    fs::remove(fs::path(base) / "model-00002-of-00002.safetensors");
  }
  // A shape the config does not imply.
  {
    const fs::path cfg = fs::path(base) / "config.json";
    const auto saved = testing::read_bytes(cfg);
    auto j = read_json(cfg);
    j["text_config"]["n_routed_experts"] = 5;
    testing::write_text(cfg, j.dump());
    expect_refused({"convert", base, "-o", out}, out, "model.llm.layers.1.mlp.experts.w13_weight",
                   "target.unknown_tensor");
    const auto r = run_cli({"convert", base, "-o", out});
    EXPECT_NE(r.err.find("inkling.shape"), std::string::npos) << r.err;
    // A key the shapes need.
    j = read_json(cfg);
    j["text_config"].erase("d_rel");
    testing::write_text(cfg, j.dump());
    expect_refused({"convert", base, "-o", out}, out, "d_rel", "inkling.config");
    testing::write_bytes(cfg, saved);
  }
  // A missing tensor: the dense layer's down projection (w2_md).
  {
    const std::string lacking = (d / "lacking").string();
    ASSERT_EQ(run_test_python("inkling.py",
                              {"make", lacking, "--drop", "model.llm.layers.0.mlp.w2_md.weight"}),
              0);
    expect_refused({"convert", lacking, "-o", out}, out,
                   "missing the tensor that becomes model.layers.0.mlp.down_proj.weight",
                   "target.unknown_tensor");
  }
  // Rows of an odd width cannot be packed two a byte; int8 takes them.
  {
    const std::string odd = (d / "odd").string();
    ASSERT_EQ(run_test_python("inkling.py", {"make", odd, "--inter", "15"}), 0);
    expect_refused({"convert", odd, "-o", out}, out, "model.llm.layers.1.mlp.experts.w2_weight",
                   "target.unknown_tensor");
    const auto r = run_cli({"convert", odd, "-o", out});
    EXPECT_NE(r.err.find("inkling.odd_columns"), std::string::npos) << r.err;
    const auto i8 = run_cli({"convert", odd, "-o", out, "--bits", "experts=8"});
    EXPECT_EQ(i8.exit_code, 0) << i8.err;
    EXPECT_EQ(run_test_python("inkling.py", {"int4", odd, out, "--bits", "8"}), 0);
  }
}

// F16 and F32 sources (no BF16 fast path) convert as derived at both widths; a NaN among the
// interleaved up rows is named as the element of the stored tensor it is.
TEST(InklingTarget, FloatSourcesAndANonFiniteUpRow) {
  TempDir d;
  for (const std::string dtype : {"F16", "F32"}) {
    const std::string src = (d / dtype).string();
    ASSERT_EQ(run_test_python("inkling.py", {"make", src, "--dtype", dtype}), 0);
    for (const std::string bits : {"4", "8"}) {
      const std::string out = (d / (dtype + "-" + bits)).string();
      const auto r =
          run_cli({"convert", src, "-o", out, "--bits", "experts=" + bits, "--job-size", "1kB"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(run_test_python("inkling.py", {"int4", src, out, "--bits", bits}), 0) << dtype;
    }
  }
  // Expert 2's w13 is [32, 32]: flat element 2 * 1024 + 5 * 32 + 7 is its row 5 (the third up
  // row), column 7.
  const std::string w13 = "model.llm.layers.1.mlp.experts.w13_weight";
  const std::string bad = (d / "nan").string(), out = (d / "nan-out").string();
  ASSERT_EQ(run_test_python("inkling.py", {"make", bad, "--nan", w13 + ":2215"}), 0);
  expect_refused({"convert", bad, "-o", out}, out, w13 + "': row 2 column 7 is nan",
                 "weights.finite");
}

// check-load fails (exit 1) on a container inkling.c would refuse.
TEST(InklingTarget, CheckLoadCatchesWhatTheLoaderRefuses) {
  TempDir d;
  const Converted c = convert_fixture(d);
  const std::string copy = (d / "copy").string();
  fs::copy(c.container, copy);
  auto cfg = read_json(fs::path(copy) / "config.json");
  cfg["text_config"]["n_routed_experts"] = 2;  // rows now 4 x hidden_size / 2 bytes
  testing::write_text(fs::path(copy) / "config.json", cfg.dump());
  const auto r = run_cli({"check-load", copy});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("unsupported container row size"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qrepack
