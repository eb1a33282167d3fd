// Inkling's reference forward pass (the text model as c/inkling.c computes it), its oracle in
// the runtime's schema (ref_inkling.json) and eval on its containers: against an independent
// torch implementation written from the runtime's source (tests/python/inkling_forward.py) on
// the release layout, the colibri-inkling container at int4 and int8 and that container with the
// dense-int4g64 overlay; across thread counts; with the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::joined_ids;
using testing::read_bytes;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;

// The release fixture with its oracle, its colibri-inkling containers (int4, int8) and the
// int4 container with the dense overlay where inkling.c finds it, made once.
class InklingModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_cli({"fixture", "inkling", "--oracle", "-o", path("release")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli({"convert", path("release"), "-o", path("int4")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli({"convert", path("release"), "-o", path("int8"), "--bits", "experts=8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli(
        {"convert", path("int4"), "-o", path("overlay"), "--target", "colibri-inkling-dense"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    fs::copy(path("int4"), path("int4-dense"), fs::copy_options::recursive);
    fs::create_directory(fs::path(path("int4-dense")) / "dense-int4g64");
    fs::copy(fs::path(path("overlay")) / "dense.safetensors",
             fs::path(path("int4-dense")) / "dense-int4g64" / "dense.safetensors");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* InklingModel::dir_ = nullptr;

// The oracle's logits, argmaxes and greedy continuation, each recomputed by torch.
void expect_torch_agrees(const std::string& ck, const fs::path& tmp) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  const auto r = run_cli({"oracle", ck, "-o", ref, "--logits", logits});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = read_json(ref);
  EXPECT_EQ(run_test_python("inkling_forward.py", {ck, joined_ids(j["full_ids"]),
                                                   std::to_string(j["prompt_ids"].size()), logits}),
            0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
}

TEST_F(InklingModel, EveryLayoutMatchesAnIndependentTorchImplementation) {
  for (const char* ck : {"release", "int4", "int8", "int4-dense"}) {
    expect_torch_agrees(path(ck), tmp.path());
  }
}

TEST_F(InklingModel, OracleFollowsTheRuntimesSchema) {
  // make_tiny_inkling.py's fields and defaults: its prompt, 24 greedy tokens, the teacher-forced
  // argmax at every position of the full sequence.
  const auto file = fs::path(path("release")) / "ref_inkling.json";
  const auto raw = read_bytes(file);
  const auto j = nlohmann::ordered_json::parse(raw.begin(), raw.end());
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"prompt_ids", "full_ids", "tf_pred"}));
  EXPECT_EQ(j["prompt_ids"],
            nlohmann::ordered_json::array({7, 42, 199, 3, 88, 154, 21, 60, 9, 133, 77, 245}));
  EXPECT_EQ(j["full_ids"].size(), 36u);
  EXPECT_EQ(j["tf_pred"].size(), 36u);
  for (std::size_t i = 11; i + 1 < 36; ++i) EXPECT_EQ(j["tf_pred"][i], j["full_ids"][i + 1]) << i;
  // Every id is a real token (below unpadded_vocab_size 300, not the padded 320).
  for (const auto& id : j["full_ids"]) EXPECT_LT(id.get<int>(), 300);
  // `qrepack oracle` writes the same file.
  const auto again = (tmp / "again.json").string();
  ASSERT_EQ(run_cli({"oracle", path("release"), "-o", again}).exit_code, 0);
  EXPECT_EQ(read_bytes(again), raw);
  // The logits are [positions, unpadded vocab].
  const auto l = tmp / "l.npy";
  ASSERT_EQ(run_cli({"oracle", path("int8"), "-o", again, "--logits", l.string(), "--prompt",
                     "1,2,3", "--new-tokens", "4"})
                .exit_code,
            0);
  const auto npy = read_bytes(l);
  const std::string header(npy.begin(), npy.begin() + 128);
  EXPECT_NE(header.find("'shape': (7, 300)"), std::string::npos) << header;
}

TEST_F(InklingModel, OracleIsByteIdenticalForAnyThreadCount) {
  for (const char* ck : {"release", "int4-dense"}) {
    testing::expect_oracle_same_for_any_thread_count(path(ck), tmp.path(), {"--new-tokens", "6"});
  }
}

// eval of every container against the release: int8 experts follow it more closely than int4,
// the overlay (int8 embeddings and attention, int4-g64 dense matrices) moves it further; the
// release against itself agrees exactly.
TEST_F(InklingModel, EvalReadsEveryContainer) {
  const auto r = run_cli({"eval", path("release"), path("release"), path("int8"), path("int4"),
                          path("int4-dense"), "--json", "--sequences", "4", "--length", "24"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out)["outputs"];
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["top1_agreement"], 1.0);
  EXPECT_EQ(j[0]["kl_mean"], 0.0);
  const double kl8 = j[1]["kl_mean"], kl4 = j[2]["kl_mean"], kl4d = j[3]["kl_mean"];
  EXPECT_GT(kl8, 0.0);
  EXPECT_LT(kl8 * 4, kl4);
  EXPECT_NE(kl4d, kl4);
  EXPECT_GE(j[1]["top1_agreement"].get<double>(), j[2]["top1_agreement"].get<double>());
  EXPECT_EQ(j[0]["positions"], 96);
}

TEST_F(InklingModel, RefusalsNameTheVariantAndWriteNothing) {
  const fs::path ck = tmp / "edited";
  fs::copy(path("int8"), ck);
  auto cfg = read_json(ck / "config.json");
  cfg["text_config"]["hidden_act"] = "gelu";
  testing::write_text(ck / "config.json", cfg.dump());
  auto r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("hidden_act \"gelu\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // Query heads that do not share key/value heads evenly.
  cfg["text_config"]["hidden_act"] = "silu";
  cfg["text_config"]["swa_num_key_value_heads"] = 3;
  testing::write_text(ck / "config.json", cfg.dump());
  r = run_cli({"eval", path("int8"), ck.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
  // A stored shape the config does not imply is named, and nothing is written.
  cfg["text_config"]["swa_num_key_value_heads"] = 2;
  cfg["text_config"]["intermediate_size"] = 16;
  testing::write_text(ck / "config.json", cfg.dump());
  r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mlp.experts.gate_up_proj"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // A container whose config describes another model than the source's.
  r = run_cli({"eval", path("release"), ck.string()});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace qrepack
