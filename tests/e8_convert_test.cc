// E8/IQ3 (engine fmt 6) end to end through the binary on the tiny-e8 fixture: the routed experts
// written as the engine converter writes them (bytes equal to the independent numpy derivation,
// tests/python/e8_iq3.py; .qs the single 6.0), check-load, verify and eval decoding them, the
// parameters recorded and carried through --shard workers and merge, and every refusal before
// any output: partial projections, other classes, widths that are not multiples of 256, and
// the container targets whose runtimes have no fmt 6.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qrepack/io/checkpoint.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;

class E8Convert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_cli({"fixture", "moe-fp8", "--preset", "tiny-e8", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli({"fixture", "moe-fp8", "-o", tiny()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli({"convert", src(), "-o", out(), "--bits", "experts=e8"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    convert_out_ = new std::string(r.out);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete convert_out_;
    dir_ = nullptr;
  }
  static std::string src() { return (dir_->path() / "src").string(); }
  static std::string tiny() { return (dir_->path() / "tiny").string(); }
  static std::string out() { return (dir_->path() / "e8").string(); }
  static std::string path(const std::string& name) { return (dir_->path() / name).string(); }

  // A refused run: exit code, the message's parts, and no output directory.
  static void expect_refused(const std::vector<std::string>& args, int code,
                             const std::vector<std::string>& parts) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, code) << r.out << r.err;
    for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << "\n" << r.err;
    EXPECT_FALSE(fs::exists(path("refused")));
  }

  static TempDir* dir_;
  static std::string* convert_out_;
};
TempDir* E8Convert::dir_ = nullptr;
std::string* E8Convert::convert_out_ = nullptr;

TEST_F(E8Convert, ExpertsMatchTheDerivationAndCheckLoad) {
  EXPECT_NE(convert_out_->find("experts=e8"), std::string::npos) << *convert_out_;  // PLAN line
  EXPECT_NE(convert_out_->find("gate=e8 up=e8 down=e8"), std::string::npos);
  EXPECT_NE(convert_out_->find("experts e8-iq3               24"), std::string::npos)
      << *convert_out_;
  EXPECT_NE(convert_out_->find("0 unloadable"), std::string::npos);
  EXPECT_NE(convert_out_->find("24 e8-iq3"), std::string::npos) << *convert_out_;
  EXPECT_EQ(testing::run_test_python("e8_iq3.py", {"container", src(), out()}), 0);

  auto ck = Checkpoint::open(out());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  const std::string w = "model.layers.3.mlp.experts.1.down_proj.weight";
  const auto t = ck->find(w);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(testing::dims(t->entry->shape), std::vector<std::uint64_t>{256 * 98});
  const auto qs = testing::tensor_bytes(*ck, w + ".qs");
  ASSERT_EQ(qs.size(), 4u);
  float tag;
  std::memcpy(&tag, qs.data(), 4);
  EXPECT_EQ(tag, 6.0f);
  // residents keep the scheme
  const auto o = ck->find("model.layers.3.self_attn.o_proj.weight.qs");
  ASSERT_TRUE(o.has_value());
  EXPECT_GT(o->entry->byte_size(), 4u);
}

TEST_F(E8Convert, VerifyAndEvalDecodeIt) {
  const auto v = run_cli({"verify", src(), out(), "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const auto j = nlohmann::json::parse(v.out);
  int e8 = 0;
  for (const auto& t : j["tensors"]) {
    if (t["format"] == "e8-iq3") {
      ++e8;
      EXPECT_LT(t["rel_l2"].get<double>(), 0.35) << t.dump();  // about 3 bits per weight
    }
  }
  EXPECT_EQ(e8, 24);
  const auto ev = run_cli({"eval", src(), out()});
  EXPECT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_NE(ev.out.find("TOP1"), std::string::npos) << ev.out;
}

TEST_F(E8Convert, ManifestRecordsE8AndShardWorkersMergeToTheSameBytes) {
  const auto manifest =
      nlohmann::json::parse(testing::read_bytes(fs::path(out()) / "qrepack.json"));
  EXPECT_EQ(manifest["parameters"]["bits"]["experts"], "e8") << manifest["parameters"].dump();
  EXPECT_EQ(manifest["parameters"]["bits"]["down"], "e8");
  const std::string parts = path("parts");
  for (int i = 0; i < 2; ++i) {
    const auto r = run_cli({"convert", src(), "-o", parts, "--bits", "experts=e8", "--shard",
                            std::to_string(i) + "/2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto m = run_cli({"merge", parts});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  for (const auto& f : testing::list_dir(out())) {
    if (f == "qrepack.json") continue;
    EXPECT_EQ(testing::read_bytes(fs::path(parts) / f), testing::read_bytes(fs::path(out()) / f))
        << f;
  }
}

TEST_F(E8Convert, RefusalsBeforeAnyOutput) {
  const std::string o = path("refused");
  expect_refused({"convert", src(), "-o", o, "--bits", "gate=e8"}, 2,
                 {"e8 covers gate, up and down together", "gate=e8, up=default, down=default"});
  expect_refused({"convert", src(), "-o", o, "--bits", "experts=e8,down=4"}, 2, {"down=4"});
  expect_refused({"convert", src(), "-o", o, "--bits", "attn=e8"}, 2,
                 {"--bits attn=e8", "routed experts only"});
  expect_refused({"convert", tiny(), "-o", o, "--bits", "experts=e8"}, 2,
                 {"model.layers.3.mlp.experts.0.down_proj.weight", "[128, 32]", "multiple of 256",
                  "rule e8.shape"});
  const std::string qwen = path("qwen36");
  ASSERT_EQ(run_cli({"fixture", "qwen36", "-o", qwen}).exit_code, 0);
  expect_refused({"convert", qwen, "-o", o, "--target", "colibri-qwen36", "--bits", "experts=e8"},
                 2, {"--bits experts=e8", "colibri-glm only"});
  expect_refused({"convert", src(), "-o", o, "--to", "bf16", "--bits", "experts=e8"}, 2,
                 {"--bits does not apply"});
}

}  // namespace
}  // namespace qrepack
