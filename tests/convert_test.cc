// convert / check-load / verify, end to end through the binary and through the plan API.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "qrepack/io/checkpoint.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/plan/convert_plan.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;

using testing::tensor_bytes;

template <typename T>
std::vector<std::uint8_t> raw(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Writes a one-shard checkpoint from (spec, bytes) pairs.
void write_checkpoint(const std::string& dir,
                      const std::vector<std::pair<TensorSpec, std::vector<std::uint8_t>>>& t) {
  std::vector<TensorSpec> specs;
  for (const auto& [s, b] : t) specs.push_back(s);
  auto plan = plan_shards(specs, kDefaultMaxShardBytes, {});
  ASSERT_TRUE(plan.ok());
  auto w = CheckpointWriter::create(dir, std::move(plan).value());
  ASSERT_TRUE(w.ok());
  for (const auto& [s, b] : t) ASSERT_TRUE((*w)->write_tensor(s.name, b).ok());
  ASSERT_TRUE((*w)->finish().ok());
}

double experts_rel_l2(const std::string& src, const std::string& out) {
  const auto r = run_cli({"verify", src, out, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  double err2 = 0, ref2 = 0;
  for (const auto& t : j["tensors"]) {
    if (t["class"] != "experts") continue;
    const double e = t["rel_l2"].get<double>();
    err2 += e * e;
    ref2 += 1;
  }
  return std::sqrt(err2 / ref2);
}

class Convert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", fixture()}).exit_code, 0);
    ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--fused-experts", "-o", fused()}).exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string fixture() { return (*dir_ / "fx").string(); }
  static std::string fused() { return (*dir_ / "fused").string(); }
  TempDir out;
  static TempDir* dir_;
};
TempDir* Convert::dir_ = nullptr;

TEST_F(Convert, EverySchemeLoadsAndPassesVerifyForBothExpertLayouts) {
  for (const std::string& src : {fixture(), fused()}) {
    for (const char* scheme :
         {"int4-row", "int4-g32", "int4-g128", "int8-row", "bf16", "f32", "fp8-block128"}) {
      const std::string o = (out / (fs::path(src).filename().string() + "-" + scheme)).string();
      const auto r = run_cli({"convert", src, "-o", o, "--to", scheme});
      ASSERT_EQ(r.exit_code, 0) << scheme << ": " << r.err;
      EXPECT_NE(r.out.find("check-load: 0 missing tensors, 0 unloadable"), std::string::npos)
          << scheme << r.out;
      // Per-row int4 of the trained-like fixture (outlier channels) errs by about 0.18-0.26.
      const auto v = run_cli({"verify", src, o, "--max-rel-err", "0.3"});
      EXPECT_EQ(v.exit_code, 0) << scheme << ": " << v.out << v.err;
      EXPECT_EQ(run_cli({"check-load", o}).exit_code, 0);
    }
  }
}

TEST_F(Convert, GroupedErrorIsBelowPerRowError) {
  const std::string row = (out / "row").string(), g32 = (out / "g32").string();
  ASSERT_EQ(run_cli({"convert", fixture(), "-o", row, "--to", "int4-row"}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", fixture(), "-o", g32, "--to", "int4-g32"}).exit_code, 0);
  EXPECT_LT(experts_rel_l2(fixture(), g32), experts_rel_l2(fixture(), row));
}

TEST_F(Convert, VerifyGateFailsWithExit1) {
  const std::string o = (out / "row").string();
  ASSERT_EQ(run_cli({"convert", fixture(), "-o", o, "--to", "int4-row"}).exit_code, 0);
  const auto v = run_cli({"verify", fixture(), o, "--max-rel-err", "0.01"});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE(v.err.find("exceeds --max-rel-err"), std::string::npos);
}

TEST_F(Convert, OutputIsDeterministicAndTheManifestAccountsForEverything) {
  const std::string a = (out / "a").string(), b = (out / "b").string();
  ASSERT_EQ(run_cli({"convert", fused(), "-o", a, "--bits", "experts=8,io=16"}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", fused(), "-o", b, "--bits", "experts=8,io=16"}).exit_code, 0);
  for (const auto& f : testing::list_dir(a)) {
    EXPECT_EQ(testing::read_bytes(fs::path(a) / f), testing::read_bytes(fs::path(b) / f)) << f;
  }
  const auto m = nlohmann::json::parse(testing::read_bytes(fs::path(a) / "qrepack.json"));
  EXPECT_EQ(m["parameters"]["to"], "int4-g128");
  EXPECT_EQ(m["parameters"]["bits"]["experts"], 8);
  auto src = Checkpoint::open(fused());
  ASSERT_EQ(m["sources"].size(), src->tensors().size());  // every source tensor, once
  std::map<std::string, int> disp;
  for (const auto& s : m["sources"]) ++disp[s["disposition"].get<std::string>()];
  EXPECT_EQ(disp["unfuse"], 4);    // 2 MoE layers x (gate_up, down); the MTP layer's dropped
  EXPECT_EQ(disp["consume"], 66);  // FP8 sidecars
  auto ck = Checkpoint::open(a);
  for (const auto& o : m["outputs"]) {
    const auto bytes = tensor_bytes(*ck, o["name"].get<std::string>());
    EXPECT_EQ(o["xxhash64"], fmt::format("{:016x}", XXH64(bytes.data(), bytes.size(), 0)))
        << o["name"];
  }
  const auto cl = run_cli({"check-load", a});
  EXPECT_NE(cl.out.find("int8-row"), std::string::npos);
  EXPECT_NE(cl.out.find("bf16"), std::string::npos);
}

TEST_F(Convert, OutputIsIdenticalForAnyThreadCount) {
  for (const char* to : {"int4-g128", "int4-row", "int8-row", "bf16", "f32", "fp8-block128"}) {
    std::vector<std::string> dirs;
    for (const char* threads : {"1", "2", "3"}) {
      dirs.push_back((out / (std::string("t") + threads + to)).string());
      const auto r = run_cli(
          {"convert", fused(), "-o", dirs.back(), "--to", to, "--threads", threads, "--progress"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      if (std::string(threads) == "1") {
        EXPECT_NE(r.err.find("100.0%"), std::string::npos) << "--progress: " << r.err;
      }
    }
    for (const auto& f : testing::list_dir(dirs[0])) {
      const auto want = testing::read_bytes(fs::path(dirs[0]) / f);
      EXPECT_EQ(testing::read_bytes(fs::path(dirs[1]) / f), want) << to << " " << f;
      EXPECT_EQ(testing::read_bytes(fs::path(dirs[2]) / f), want) << to << " " << f;
    }
  }
}

// Jobs of 1 KiB of f32 cut every weight into one-row jobs (128-row for fp8-block) and raw
// tensors into 1 KiB pieces: the bytes must equal the default 8 MiB jobs, which hold the
// fixture's weights whole.
TEST_F(Convert, OutputDoesNotDependOnTheJobSize) {
  for (const char* to : {"int4-g128", "int4-row", "int8-row", "bf16", "f32", "fp8-block128"}) {
    const std::string whole = (out / (std::string("whole-") + to)).string();
    const std::string tiny = (out / (std::string("tiny-") + to)).string();
    ASSERT_EQ(run_cli({"convert", fused(), "-o", whole, "--to", to}).exit_code, 0);
    const auto r = run_cli(
        {"convert", fused(), "-o", tiny, "--to", to, "--job-size", "1KiB", "--threads", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& f : testing::list_dir(whole)) {
      EXPECT_EQ(testing::read_bytes(fs::path(tiny) / f), testing::read_bytes(fs::path(whole) / f))
          << to << " " << f;
    }
  }
  const auto bad = run_cli({"convert", fused(), "-o", (out / "bad").string(), "--job-size", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--job-size must be positive"), std::string::npos) << bad.err;
}

TEST_F(Convert, UnfusingIsBitwiseExact) {
  const std::string fb = (out / "fb").string(), pb = (out / "pb").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--bf16", "--fused-experts", "-o", fb}).exit_code, 0);
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "--bf16", "-o", pb}).exit_code, 0);
  const std::string o = (out / "unfused").string();
  const auto r = run_cli(
      {"convert", fb, "-o", o, "--to", "bf16", "--unfuse-experts", "--keep-mtp", "--keep-indexer"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plain = Checkpoint::open(pb);
  auto unfused = Checkpoint::open(o);
  ASSERT_TRUE(plain.ok() && unfused.ok());
  ASSERT_EQ(plain->tensors().size(), unfused->tensors().size());
  for (const auto& t : plain->tensors()) {
    EXPECT_EQ(tensor_bytes(*plain, t.entry->name), tensor_bytes(*unfused, t.entry->name))
        << t.entry->name;
  }
}

TEST_F(Convert, AMissingExpertStopsTheRunListingIt) {
  const std::string holed = (out / "holed").string();
  ASSERT_EQ(run_cli({"reshard", fixture(), "-o", holed, "--drop",
                     "^model\\.layers\\.3\\.mlp\\.experts\\.5\\."})
                .exit_code,
            0);
  const std::string o = (out / "o").string();
  const auto r = run_cli({"convert", holed, "-o", o});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("3 tensor(s) the engine loads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.layers.3.mlp.experts.5.gate_proj.weight"), std::string::npos);
  EXPECT_NE(r.err.find("model.layers.3.mlp.experts.5.down_proj.weight"), std::string::npos);
  EXPECT_FALSE(fs::exists(o));
}

TEST_F(Convert, UsageErrors) {
  const std::string o = (out / "o").string();
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--to", "int4-g100"}).exit_code, 2);
  EXPECT_EQ(
      run_cli({"convert", fixture(), "-o", o, "--to", "bf16", "--bits", "experts=4"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--bits", "experts=5"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--bits", "gate=4,gate=8"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--mtp", "--indexer"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--mtp", "--resume"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--to", "fp8-passthrough", "--bits", "io=8"})
                .exit_code,
            2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", o, "--bits", "vision=4"}).exit_code, 2);
  EXPECT_EQ(run_cli({"convert", fixture(), "-o", fixture()}).exit_code, 2);
  EXPECT_FALSE(fs::exists(o));
}

TEST_F(Convert, DropAndSelectAreRecorded) {
  const std::string o = (out / "o").string();
  const auto r =
      run_cli({"convert", fixture(), "-o", o, "--drop", "^lm_head", "--no-coverage-gate"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("dropped 1 by rule user_drop: lm_head.weight"), std::string::npos) << r.out;
  const auto m = nlohmann::json::parse(testing::read_bytes(fs::path(o) / "qrepack.json"));
  bool found = false;
  for (const auto& s : m["sources"]) {
    if (s["name"] == "lm_head.weight") {
      found = true;
      EXPECT_EQ(s["disposition"], "drop");
    }
  }
  EXPECT_TRUE(found);
}

// Hand-derived bytes through the whole pipeline: a 1x5 F32 attention row.
TEST(ConvertBytes, OneByFiveRowGivesTheDerivedNibblesAndScale) {
  TempDir dir;
  const std::string src = (dir / "src").string();
  write_checkpoint(src, {{{"model.layers.0.self_attn.o_proj.weight", Dtype::kF32, {1, 5}},
                          raw(std::vector<float>{1.0f, -3.5f, 0.5f, 3.5f, -1.25f})}});
  const std::string o = (dir / "o").string();
  const auto r = run_cli({"convert", src, "-o", o, "--to", "int4-row", "--no-coverage-gate"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto ck = Checkpoint::open(o);
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ(tensor_bytes(*ck, "model.layers.0.self_attn.o_proj.weight"),
            (std::vector<std::uint8_t>{0x1A, 0xF9, 0x06}));
  EXPECT_EQ(tensor_bytes(*ck, "model.layers.0.self_attn.o_proj.weight.qs"),
            raw(std::vector<float>{0.5f}));
}

// The same values stored as F16, BF16, F32 and F64 give the same bytes (any mix of source dtypes).
TEST(ConvertBytes, EverySourceFloatDtypeGivesTheSameBytes) {
  const std::vector<float> v = {1.0f, -3.5f, 0.5f, 3.5f, -1.25f};  // exact in every dtype
  std::vector<std::uint16_t> f16 = {0x3C00, 0xC300, 0x3800, 0x4300, 0xBD00};
  std::vector<std::uint16_t> bf16 = {0x3F80, 0xC060, 0x3F00, 0x4060, 0xBFA0};
  std::vector<double> f64(v.begin(), v.end());
  TempDir dir;
  const std::string src = (dir / "src").string();
  write_checkpoint(src,
                   {{{"model.layers.0.self_attn.o_proj.weight", Dtype::kF16, {1, 5}}, raw(f16)},
                    {{"model.layers.0.self_attn.q_a_proj.weight", Dtype::kBF16, {1, 5}}, raw(bf16)},
                    {{"model.layers.0.self_attn.kv_b_proj.weight", Dtype::kF64, {1, 5}}, raw(f64)},
                    {{"model.layers.0.self_attn.q_b_proj.weight", Dtype::kF32, {1, 5}}, raw(v)}});
  const std::string o = (dir / "o").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", o, "--to", "int4-row", "--no-coverage-gate"}).exit_code,
            0);
  auto ck = Checkpoint::open(o);
  for (const char* p : {"o_proj", "q_a_proj", "kv_b_proj", "q_b_proj"}) {
    const std::string name = std::string("model.layers.0.self_attn.") + p + ".weight";
    EXPECT_EQ(tensor_bytes(*ck, name), (std::vector<std::uint8_t>{0x1A, 0xF9, 0x06})) << p;
  }
}

// Bad sources: each gets its own kind from the plan and exit 2 with no output.
struct BadSource {
  const char* what;
  std::vector<std::pair<TensorSpec, std::vector<std::uint8_t>>> tensors;
  ErrorKind kind;
};

TEST(ConvertBadInput, EachProblemHasItsKindAndLeavesNoOutput) {
  const std::string w = "model.layers.0.self_attn.o_proj.weight";
  const std::vector<std::uint8_t> q(256 * 256, 0x38);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadSource> cases = {
      {"missing scale_inv", {{{w, Dtype::kF8E4M3, {256, 256}}, q}}, ErrorKind::kMissingScale},
      {"wrong scale shape",
       {{{w, Dtype::kF8E4M3, {256, 256}}, q},
        {{w + "_scale_inv", Dtype::kF32, {2, 1}}, raw(std::vector<float>{1, 1})}},
       ErrorKind::kScaleShapeMismatch},
      {"NaN scale",
       {{{w, Dtype::kF8E4M3, {256, 256}}, q},
        {{w + "_scale_inv", Dtype::kF32, {2, 2}}, raw(std::vector<float>{1, nan, 1, 1})}},
       ErrorKind::kInvalidScale},
      {"zero scale",
       {{{w, Dtype::kF8E4M3, {256, 256}}, q},
        {{w + "_scale_inv", Dtype::kF32, {2, 2}}, raw(std::vector<float>{1, 1, 0, 1})}},
       ErrorKind::kInvalidScale},
      {"negative scale",
       {{{w, Dtype::kF8E4M3, {256, 256}}, q},
        {{w + "_scale_inv", Dtype::kF32, {2, 2}}, raw(std::vector<float>{1, 1, 1, -2})}},
       ErrorKind::kInvalidScale},
      {"unknown 3-D tensor",
       {{{"model.layers.0.mlp.experts.weird", Dtype::kBF16, {2, 2, 2}},
         std::vector<std::uint8_t>(16)}},
       ErrorKind::kUnclaimedTensor},
      {"unclaimed name",
       {{{"vision.patch.weight", Dtype::kBF16, {2, 2}}, std::vector<std::uint8_t>(8)}},
       ErrorKind::kUnclaimedTensor},
  };
  for (const BadSource& c : cases) {
    TempDir dir;
    const std::string src = (dir / "src").string();
    write_checkpoint(src, c.tensors);
    auto ck = Checkpoint::open(src);
    ASSERT_TRUE(ck.ok()) << c.what;
    ConvertOptions o;
    o.skip_coverage = true;
    auto plan = plan_conversion(*ck, o);
    ASSERT_FALSE(plan.ok()) << c.what;
    EXPECT_EQ(plan.error().kind(), c.kind) << c.what << ": " << plan.error().to_string();
    const std::string out = (dir / "out").string();
    const auto r = run_cli({"convert", src, "-o", out, "--no-coverage-gate"});
    EXPECT_EQ(r.exit_code, 2) << c.what;
    EXPECT_FALSE(fs::exists(out)) << c.what;
  }
}

TEST(ConvertBadInput, NonFiniteWeightsStopTheRunWithNoOutput) {
  TempDir dir;
  const std::string src = (dir / "src").string();
  write_checkpoint(src,
                   {{{"model.layers.0.self_attn.o_proj.weight", Dtype::kF32, {2, 2}},
                     raw(std::vector<float>{1, 2, std::numeric_limits<float>::infinity(), 4})}});
  const std::string out = (dir / "out").string();
  const auto r = run_cli({"convert", src, "-o", out, "--no-coverage-gate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("row 1 column 0"), std::string::npos) << r.err;
  EXPECT_TRUE(!fs::exists(out) || testing::list_dir(out).empty());
}

TEST(ConvertBadInput, KeepUnknownPassesUnclaimedTensorsThrough) {
  TempDir dir;
  const std::string src = (dir / "src").string();
  write_checkpoint(src, {{{"vision.patch.weight", Dtype::kBF16, {2, 2}},
                          std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}}});
  const std::string out = (dir / "out").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", out, "--no-coverage-gate", "--keep-unknown"}).exit_code,
            0);
  auto ck = Checkpoint::open(out);
  EXPECT_EQ(tensor_bytes(*ck, "vision.patch.weight"),
            (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// Every file of `out` equals `fresh`'s, and the manifest's output records too (its other fields
// name the run).
void expect_same_as_fresh(const std::string& fresh, const std::string& out) {
  for (const auto& f : testing::list_dir(fresh)) {
    if (f == "qrepack.json") continue;
    EXPECT_EQ(testing::read_bytes(fs::path(fresh) / f), testing::read_bytes(fs::path(out) / f))
        << f;
  }
  const auto m1 = nlohmann::json::parse(testing::read_bytes(fs::path(fresh) / "qrepack.json"));
  const auto m2 = nlohmann::json::parse(testing::read_bytes(fs::path(out) / "qrepack.json"));
  EXPECT_EQ(m1["outputs"], m2["outputs"]);
}

// A run killed after some shards leaves them and its progress; --resume reuses the intact
// ones, rewrites a damaged one, refuses other flags or a changed source, and ends
// byte-identical to a fresh run.
TEST(ConvertResume, ReusesFinishedShardsAndMatchesAFreshRun) {
  TempDir dir;
  const std::string good = (dir / "good").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", good}).exit_code, 0);
  const std::string out = (dir / "out").string();
  const std::vector<std::string> flags = {
      "--to", "int4-g32", "--max-shard-size", "60kB", "--resume", "--threads", "1"};
  auto args = [&](const std::string& src, std::vector<std::string> extra) {
    std::vector<std::string> a = {"convert", src, "-o", out};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  ::setenv("QREPACK_FAULT_KILL_AFTER_FILES", "3", 1);
  auto r = run_cli(args(good, flags));
  ::unsetenv("QREPACK_FAULT_KILL_AFTER_FILES");
  ASSERT_GE(r.exit_code, 128) << r.out << r.err;  // killed
  ASSERT_TRUE(fs::exists(fs::path(out) / ".qrepack-progress.json"));
  std::vector<std::string> done;
  for (const auto& f : testing::list_dir(out)) {
    if (f.ends_with(".safetensors")) done.push_back(f);
  }
  ASSERT_EQ(done.size(), 3u);

  // Other flags: refused, nothing touched.
  r = run_cli(args(good, {"--to", "int4-row", "--max-shard-size", "60kB", "--resume"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("parameters"), std::string::npos) << r.err;
  // Without --resume the partial run is not overwritten either.
  EXPECT_EQ(run_cli(args(good, {"--to", "int4-g32", "--max-shard-size", "60kB"})).exit_code, 2);
  // The same layout from other files (a copy: newer modification times): refused by name.
  const std::string copy = (dir / "copy").string();
  fs::copy(good, copy, fs::copy_options::recursive);
  r = run_cli(args(copy, flags));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rule resume.same_source"), std::string::npos) << r.err;

  // Damage one finished shard: it must be rewritten, the others reused.
  {
    std::fstream f(fs::path(out) / done[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.write("\x55", 1);
  }
  r = run_cli(args(good, flags));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("resume: {} shard(s) reused", done.size() - 1)),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(fs::path(out) / ".qrepack-progress.json"));

  const std::string fresh = (dir / "fresh").string();
  ASSERT_EQ(run_cli({"convert", good, "-o", fresh, "--to", "int4-g32", "--max-shard-size", "60kB",
                     "--resume"})
                .exit_code,
            0);
  expect_same_as_fresh(fresh, out);
}

// --resume over a finished output that lost a shard: the missing one is written again, a
// present one changed in place since the manifest (its tensors no longer hash to the records)
// too, the intact ones are kept, and the index, side files and manifest are written anew:
// the result is a fresh run's.
TEST(ConvertResume, RepairsAFinishedOutputThatLostAShard) {
  TempDir dir;
  const std::string src = (dir / "src").string(), out = (dir / "out").string();
  const std::string fresh = (dir / "fresh").string();
  ASSERT_EQ(run_cli({"fixture", "moe-fp8", "-o", src}).exit_code, 0);
  const auto convert = [&](const std::string& to) {
    return run_cli({"convert", src, "-o", to, "--to", "int4-g32", "--max-shard-size", "60kB",
                    "--resume", "--threads", "1"});
  };
  ASSERT_EQ(convert(fresh).exit_code, 0);
  ASSERT_EQ(convert(out).exit_code, 0);
  std::vector<std::string> shards;
  for (const auto& f : testing::list_dir(out)) {
    if (f.ends_with(".safetensors")) shards.push_back(f);
  }
  ASSERT_GE(shards.size(), 4u);
  fs::remove(fs::path(out) / shards[0]);
  {
    std::fstream f(fs::path(out) / shards[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.write("\x55", 1);
  }
  fs::remove(fs::path(out) / "model.safetensors.index.json");
  const auto r = convert(out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("already complete"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("resume: {} shard(s) reused", shards.size() - 2)),
            std::string::npos)
      << r.out;
  EXPECT_EQ(testing::list_dir(out), testing::list_dir(fresh));
  expect_same_as_fresh(fresh, out);
  // Intact now: a rerun has nothing to do.
  EXPECT_NE(convert(out).out.find("already complete"), std::string::npos);
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// The default fixture carries the DSA indexer and the MTP layer, as the real checkpoint does:
// the main pass drops them under their named rules, the coverage gate does not ask for them,
// and --keep-mtp / --keep-indexer keep them as stored.
TEST_F(Convert, IndexerAndMtpAreDroppedByRuleOrKeptOnRequest) {
  const std::string o = (out / "main").string(), k = (out / "kept").string();
  ASSERT_EQ(run_cli({"convert", fixture(), "-o", o}).exit_code, 0);
  const auto m = nlohmann::json::parse(testing::read_bytes(fs::path(o) / "qrepack.json"));
  std::map<std::string, int> rules;
  for (const auto& s : m["sources"]) {
    if (s["disposition"] == "drop") ++rules[s["rule"].get<std::string>()];
  }
  // MTP layer 5, in weights (sidecars are consumed by their weight): eh_proj, enorm, hnorm,
  // shared_head.norm, 2 layernorms, 5 attention projections and 2 norms, 5 indexer tensors,
  // router weight and bias, 3 shared and 24 routed expert projections.
  EXPECT_EQ(rules["mtp_layer"], 4 + 2 + 5 + 2 + 5 + 2 + 3 + 24);
  EXPECT_EQ(rules["dsa_indexer"], 5 * 5);  // layers 0-4
  auto ck = Checkpoint::open(o);
  EXPECT_FALSE(ck->find("model.layers.0.self_attn.indexer.wk.weight").has_value());
  EXPECT_FALSE(ck->find("model.layers.5.eh_proj.weight").has_value());
  ASSERT_EQ(run_cli({"convert", fixture(), "-o", k, "--keep-mtp", "--keep-indexer"}).exit_code, 0);
  auto kept = Checkpoint::open(k);
  EXPECT_EQ(kept->find("model.layers.5.eh_proj.weight")->entry->dtype, Dtype::kBF16);
  EXPECT_EQ(kept->find("model.layers.0.self_attn.indexer.wk.weight")->entry->dtype, Dtype::kF8E4M3);
}

}  // namespace
}  // namespace qrepack
