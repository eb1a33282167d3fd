// `qrepack convert CKPT.safetensors --to e0m3-sfb` (a MIP-QAT pi0.5 checkpoint, FlashRT fork's
// convert_qat_ckpt_e0m3.py) and `qrepack check CKPT --artifact A` through the CLI, on checkpoints
// in the real tensor names written by tests/python/qat_e0m3.py, whose `check` derives every
// byte of the artifact independently in torch.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qrepack/fixtures/qat_checkpoint.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/safetensors.h"
#include "test_util.h"

namespace qrepack {
namespace {

using testing::run_cli;

const std::string kLayer = "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj";

class OmegaQat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_EQ(testing::run_test_python("qat_e0m3.py", {"make", file("ck.safetensors"), "bf16"}), 0);
    const auto r =
        run_cli({"convert", file("ck.safetensors"), "--to", "e0m3-sfb", "-o", file("art.pt")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_NE(r.out.find("validated 126/126 action-expert weights"), std::string::npos) << r.out;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string file(const std::string& n) { return (*dir_ / n).string(); }
  static testing::TempDir* dir_;
};
testing::TempDir* OmegaQat::dir_ = nullptr;

TEST_F(OmegaQat, ArtifactEqualsAnIndependentDerivationForEveryDtype) {
  EXPECT_EQ(
      testing::run_test_python("qat_e0m3.py", {"check", file("ck.safetensors"), file("art.pt")}),
      0);
  for (const char* dtype : {"f16", "f32"}) {
    const std::string ck = file(std::string("ck_") + dtype + ".safetensors");
    const std::string out = file(std::string("art_") + dtype + ".pt");
    ASSERT_EQ(testing::run_test_python("qat_e0m3.py", {"make", ck, dtype}), 0);
    const auto r = run_cli({"convert", ck, "--to", "e0m3-sfb", "--keep-fp16", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::run_test_python("qat_e0m3.py", {"check", ck, out}), 0) << dtype;
  }
}

TEST_F(OmegaQat, ConvertIsIdenticalForAnyThreadCount) {
  for (const char* threads : {"1", "3"}) {
    const std::string out = file(std::string("thr") + threads + ".pt");
    // The same path string: source_pack_meta.ckpt records it.
    const auto r = run_cli(
        {"convert", file("ck.safetensors"), "--to", "e0m3-sfb", "--threads", threads, "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::read_bytes(out), testing::read_bytes(file("art.pt"))) << threads;
  }
}

TEST_F(OmegaQat, CheckGatesTheArtifactAgainstTheCheckpoint) {
  const auto one =
      run_cli({"check", file("ck.safetensors"), "--artifact", file("art.pt"), "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto j = nlohmann::json::parse(one.out);
  EXPECT_EQ(j["artifact_bytes_differing_from_pack"], 0);
  EXPECT_GT(j["variants"][0]["global_cos"].get<double>(), 0.98);
  EXPECT_TRUE(j["missing_metadata"].empty());
  // A checkpoint has no scale table: the header names no T and no step.
  const auto text = run_cli({"check", file("ck.safetensors"), "--artifact", file("art.pt")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("(N=128, K=64); 256 synthetic tokens, seed 0"), std::string::npos)
      << text.out;
  const auto all =
      run_cli({"check", file("ck.safetensors"), "--artifact", file("art.pt"), "--all"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("126 layer(s)"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("gate: every global cosine >= 0.98: pass"), std::string::npos) << all.out;
  const auto high = run_cli({"check", file("ck.safetensors"), "--artifact", file("art.pt"),
                             "--min-artifact-cos", "0.99999"});
  EXPECT_EQ(high.exit_code, 1) << high.err;
  // Without an artifact a checkpoint has nothing to check.
  const auto none = run_cli({"check", file("ck.safetensors")});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("pass --artifact"), std::string::npos) << none.err;
}

// The fork's converter writes no schema_version, counts or selected_layers: such an artifact
// gates by its tensors and the report says what it lacks. Rotated aux is refused: a QAT weight
// is in the unrotated basis.
TEST_F(OmegaQat, ForkShapedArtifactsGateAndRotatedAuxIsRefused) {
  const std::string lmy = file("lmy.pt");
  ASSERT_EQ(
      testing::run_test_python("edit_e0m3_artifact.py", {file("art.pt"), lmy, "pr179", kLayer}), 0);
  const auto r = run_cli({"check", file("ck.safetensors"), "--artifact", lmy, "--all"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: the artifact lacks schema_version, selected_layers, "
                       "selected_record_count"),
            std::string::npos)
      << r.out;
  const std::string rot = file("rot.pt");
  ASSERT_EQ(testing::run_test_python("edit_e0m3_artifact.py",
                                     {file("art.pt"), rot, "rotate_qat", kLayer}),
            0);
  const auto b = run_cli({"check", file("ck.safetensors"), "--artifact", rot});
  EXPECT_EQ(b.exit_code, 2) << b.err;
  EXPECT_NE(b.err.find("duquant_rotation_perm must be int64 arange(K)"), std::string::npos)
      << b.err;
}

TEST_F(OmegaQat, EachBrokenRuleIsOneErrorAndNoOutput) {
  struct Case {
    const char* variant;
    const char* message;
  };
  for (const Case& c :
       {Case{"missing",
             "1 of pi0.5's 126 expert projections are missing (first: "
             "layers.17.mlp.down_proj"},
        Case{"extra", "expert layer 18 is beyond pi0.5's 18 layers"},
        Case{"nan", "layers.17.mlp.up_proj.weight': element 197 is NaN or Inf in fp16"},
        Case{"overflow", "layers.17.mlp.up_proj.weight': element 135 is NaN or Inf in fp16"},
        Case{"shape",
             "layers.17.self_attn.k_proj.weight': must be 2-D [N, K] with N and K "
             "positive multiples of 64"},
        Case{"width",
             "layers.17.self_attn.o_proj.weight': the hidden width is 128, another "
             "layer's is 64"}}) {
    const std::string ck = file(std::string("bad_") + c.variant + ".safetensors");
    const std::string out = file(std::string("bad_") + c.variant + ".pt");
    ASSERT_EQ(testing::run_test_python("qat_e0m3.py", {"make", ck, "bf16", c.variant}), 0);
    const auto r = run_cli({"convert", ck, "--to", "e0m3-sfb", "-o", out});
    EXPECT_EQ(r.exit_code, 2) << c.variant << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.variant << ": " << r.err;
    EXPECT_NE(r.err.find("omega.qat"), std::string::npos) << c.variant << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.variant;
  }
}

TEST_F(OmegaQat, SelectConvertsASubsetAndFoldsAreRefused) {
  const auto r = run_cli({"convert", file("ck.safetensors"), "--to", "e0m3-sfb", "--select",
                          "layers\\.3\\.", "-o", file("l3.pt")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("validated 7/7 action-expert weights"), std::string::npos) << r.out;
  const auto c =
      run_cli({"check", file("ck.safetensors"), "--artifact", file("l3.pt"), "--all", "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(c.out)["layers"].size(), 7u);
  for (const auto& flag : {std::vector<std::string>{"--fold", "mean"},
                           std::vector<std::string>{"--format", "safetensors"}}) {
    std::vector<std::string> args = {"convert", file("ck.safetensors"), "--to", "e0m3-sfb",
                                     "-o",      file("never.pt")};
    args.insert(args.end(), flag.begin(), flag.end());
    const auto f = run_cli(args);
    EXPECT_EQ(f.exit_code, 2) << f.err;
    EXPECT_NE(f.err.find("a QAT checkpoint converts with --fold none"), std::string::npos) << f.err;
    EXPECT_FALSE(std::filesystem::exists(file("never.pt")));
  }
}

// `qrepack fixture qat` (no Python needed): every encoding converts, and its artifact equals
// the independent torch derivation; the planted blocks are where the header says; the file is
// a function of the seed; a name convert would not take as a QAT source is refused.
TEST_F(OmegaQat, BuiltInFixtureConvertsAndMatchesTheDerivation) {
  for (const char* enc : {"bf16", "f16", "f32"}) {
    const std::string ck = file(std::string("fx_") + enc + ".safetensors");
    const std::string out = file(std::string("fx_") + enc + ".pt");
    auto r = run_cli({"fixture", "qat", "--encoding", enc, "-o", ck});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_cli({"convert", ck, "--to", "e0m3-sfb", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("validated 126/126 action-expert weights"), std::string::npos) << r.out;
    EXPECT_EQ(testing::run_test_python("qat_e0m3.py", {"check", ck, out}), 0) << enc;
    EXPECT_EQ(run_cli({"check", ck, "--artifact", out, "--all"}).exit_code, 0) << enc;
  }
  auto f = SafetensorsFile::open(file("fx_bf16.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tensors().size(), 128u);  // 126 projections + 2 the converter leaves alone
  const TensorEntry* q = nullptr;
  for (const auto& t : f->tensors()) {
    if (t.name == kLayer + ".weight") q = &t;
  }
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(testing::dims(q->shape), (std::vector<std::uint64_t>{128, 64}));
  namespace e = qat_fixture_edges;
  std::vector<std::uint8_t> rows(2 * 64 * 2);
  ASSERT_TRUE(f->read(*q, 0, rows).ok());
  for (std::uint64_t c = 0; c < 64; ++c) {
    std::uint16_t zero = 0, tiny = 0;
    std::memcpy(&zero, &rows[(e::kZeroRow * 64 + c) * 2], 2);
    std::memcpy(&tiny, &rows[(e::kTinyRow * 64 + c) * 2], 2);
    if (c < e::kColumns) {
      EXPECT_EQ(zero, 0u) << c;
      EXPECT_EQ(tiny, bf16_encode(e::kTinyValue)) << c;
    } else {
      EXPECT_NE(zero, 0u) << c;  // the rest of the rows sit on the grid's nonzero steps
    }
  }
  const std::string again = file("fx_again.safetensors"), other = file("fx_other.safetensors");
  ASSERT_EQ(run_cli({"fixture", "qat", "-o", again}).exit_code, 0);
  ASSERT_EQ(run_cli({"fixture", "qat", "--seed", "38", "-o", other}).exit_code, 0);
  EXPECT_EQ(testing::read_bytes(again), testing::read_bytes(file("fx_bf16.safetensors")));
  EXPECT_NE(testing::read_bytes(other), testing::read_bytes(again));
  const auto bad = run_cli({"fixture", "qat", "-o", file("ck.bin")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find(".safetensors"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(file("ck.bin")));
}

}  // namespace
}  // namespace qrepack
