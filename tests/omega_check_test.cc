// `qrepack fixture omega-pack` and `qrepack check` through the CLI: the fixture against the
// issue's spec (checked with Debian's torch), emulate mode's report and usage errors, and the
// artifact gate on good, damaged and inconsistent artifacts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "qrepack/formats/float16.h"
#include "qrepack/omega/e0m3_convert.h"
#include "test_util.h"

namespace qrepack {
namespace {

using testing::run_cli;

const std::string kQ = "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj";

class OmegaCheck : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const auto r = run_cli({"fixture", "omega-pack", "--small", "-o", file("pack.pt")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* fold : {"none", "mean", "actnorm"}) {
      std::vector<std::string> args{"convert", file("pack.pt"),
                                    "--to",    "e0m3-sfb",
                                    "--fold",  fold,
                                    "-o",      file(std::string("art_") + fold + ".pt")};
      if (std::string(fold) == "actnorm") {  // compared with torch 1.13 (weights_only)
        args.push_back("--keep-fp16");
        args.push_back("--act-out-scale-tensor");
      }
      const auto c = run_cli(args);
      ASSERT_EQ(c.exit_code, 0) << c.err;
    }
    // actnorm as FlashRT writes it: act_out_scale a Python float.
    const auto f = run_cli({"convert", file("pack.pt"), "--to", "e0m3-sfb", "--fold", "actnorm",
                            "--keep-fp16", "-o", file("art_actnorm_float.pt")});
    ASSERT_EQ(f.exit_code, 0) << f.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string file(const std::string& n) { return (*dir_ / n).string(); }
  static nlohmann::json json_of(const testing::CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* OmegaCheck::dir_ = nullptr;

TEST_F(OmegaCheck, FixtureMatchesTheSpecLoadsInTorchAndIsDeterministic) {
  EXPECT_EQ(testing::run_test_python("check_omega_fixture.py", {file("pack.pt"), "small"}), 0);
  ASSERT_EQ(run_cli({"fixture", "omega-pack", "--small", "-o", file("again.pt")}).exit_code, 0);
  EXPECT_EQ(testing::read_bytes(file("pack.pt")), testing::read_bytes(file("again.pt")));
  ASSERT_EQ(
      run_cli({"fixture", "omega-pack", "--small", "--seed", "1", "-o", file("s1.pt")}).exit_code,
      0);
  EXPECT_NE(testing::read_bytes(file("pack.pt")), testing::read_bytes(file("s1.pt")));
  const auto v = run_cli({"validate", file("pack.pt")});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, "validated 4/4 records\n");
}

TEST_F(OmegaCheck, DefaultFixtureHasThePi05Shapes) {
  testing::TempDir d;
  const auto r = run_cli({"fixture", "omega-pack", "-o", (d / "p.pt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::run_test_python("check_omega_fixture.py", {(d / "p.pt").string(), "default"}),
            0);
}

// At pi0.5's widths each record is written in many bands of 128-row tiles, on every worker:
// the safetensors container still holds the .pt's content, and the same bytes at any thread
// count.
TEST_F(OmegaCheck, SafetensorsContainerInBandsMatchesThePtAtAnyThreadCount) {
  testing::TempDir d;
  const std::string pack = (d / "p.pt").string();
  ASSERT_EQ(run_cli({"fixture", "omega-pack", "-o", pack}).exit_code, 0);
  const auto convert = [&](const std::string& out, const char* format, const char* threads) {
    const auto r = run_cli({"convert", pack, "--to", "e0m3-sfb", "--fold", "mean", "--keep-fp16",
                            "--format", format, "--threads", threads, "-o", out});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  const std::string pt = (d / "a.pt").string(), one = (d / "t1.safetensors").string(),
                    two = (d / "t2.safetensors").string();
  convert(pt, "pt", "2");
  convert(one, "safetensors", "1");
  convert(two, "safetensors", "2");
  EXPECT_EQ(testing::read_bytes(one), testing::read_bytes(two));
  EXPECT_EQ(testing::run_test_python("compare_e0m3_safetensors.py", {two, pt}), 0);
}

TEST_F(OmegaCheck, EmulateFlashrtAddsTheReferenceCheckersLowerNumbers) {
  const auto j =
      json_of(run_cli({"check", file("pack.pt"), "--s1", "--emulate-flashrt", "--json"}));
  ASSERT_EQ(j["variants"].size(), 5u);
  EXPECT_EQ(j["variants"][3]["variant"], "S0 FlashRT emulation (reference checker)");
  EXPECT_EQ(j["variants"][4]["variant"], "S1 FlashRT emulation (reference checker)");
  // Its UE4M3 rounding keeps only 2^e and 1.125 * 2^e: coarser scales, lower cosines than the
  // kernel's exact quantization (S0, S1 at indices 1 and 2).
  for (int i : {0, 1}) {
    const double exact = j["variants"][1 + i]["global_cos"];
    const double emulated = j["variants"][3 + i]["global_cos"];
    EXPECT_LT(emulated, exact - 0.005) << i;
    EXPECT_GT(emulated, 0.9) << i;
  }
  const auto bad =
      run_cli({"check", file("pack.pt"), "--emulate-flashrt", "--artifact", file("art_none.pt")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--emulate-flashrt"), std::string::npos);
}

TEST_F(OmegaCheck, EmulateReportsOmegaS0AndS1) {
  const auto j = json_of(run_cli({"check", file("pack.pt"), "--s1", "--json"}));
  EXPECT_EQ(j["layer"], kQ);
  EXPECT_EQ(j["N"], 256);
  EXPECT_EQ(j["K"], 128);
  ASSERT_EQ(j["variants"].size(), 3u);
  for (const auto& v : j["variants"]) {
    const double g = v["global_cos"], mean = v["token_cos_mean"], min = v["token_cos_min"];
    // 4-bit quantization of calibrated activations: close to, but not exactly, the reference.
    EXPECT_GT(g, 0.95) << v["variant"];
    EXPECT_LT(g, 0.9999) << v["variant"];
    EXPECT_LE(min, mean);
    EXPECT_LE(mean, 1.0);
  }
  // Another seed gives other activations and so other cosines.
  const auto j2 = json_of(run_cli({"check", file("pack.pt"), "--json", "--seed", "7"}));
  EXPECT_NE(j2["variants"][0]["global_cos"], j["variants"][0]["global_cos"]);
}

// check --all / --layers: every selected record in one run, each row equal to the one-layer
// check of that record, and the artifact gate applied to every layer.
TEST_F(OmegaCheck, AllAndLayersCheckEveryRecordAndGateEachLayer) {
  const auto all = json_of(run_cli({"check", file("pack.pt"), "--all", "--json", "--s1"}));
  ASSERT_EQ(all["layers"].size(), 4u);  // the small fixture's four records, sorted
  double lowest_s0 = 1;
  for (const auto& l : all["layers"]) {
    const auto one = json_of(run_cli(
        {"check", file("pack.pt"), "--layer", l["layer"].get<std::string>(), "--json", "--s1"}));
    EXPECT_EQ(l["variants"], one["variants"]) << l["layer"];
    lowest_s0 = std::min(lowest_s0, l["variants"][1]["global_cos"].get<double>());
  }
  EXPECT_EQ(all["min_global_cos"]["S0"].get<double>(), lowest_s0);
  const auto sel = json_of(run_cli({"check", file("pack.pt"), "--layers", "q_proj|v_proj",
                                    "--artifact", file("art_none.pt"), "--json"}));
  ASSERT_EQ(sel["layers"].size(), 2u);
  EXPECT_EQ(sel["layers"][0]["layer"], kQ);
  const auto table = run_cli({"check", file("pack.pt"), "--all", "--progress"});
  EXPECT_NE(table.out.find("4 layer(s)"), std::string::npos) << table.out;
  EXPECT_NE(table.err.find("check 4/4"), std::string::npos) << table.err;
  const auto gate = run_cli({"check", file("pack.pt"), "--all", "--artifact", file("art_mean.pt"),
                             "--min-artifact-cos", "0.9999"});
  EXPECT_EQ(gate.exit_code, 1);
  EXPECT_NE(gate.err.find("4 of 4 layer(s) below --min-artifact-cos"), std::string::npos)
      << gate.err;
  EXPECT_EQ(
      run_cli({"check", file("pack.pt"), "--all", "--artifact", file("art_mean.pt")}).exit_code, 0);
  EXPECT_EQ(run_cli({"check", file("pack.pt"), "--all", "--layers", "q"}).exit_code, 2);
  EXPECT_EQ(run_cli({"check", file("pack.pt"), "--all", "--layer", kQ}).exit_code, 2);
  EXPECT_EQ(run_cli({"check", file("pack.pt"), "--layers", "(?=x)"}).exit_code, 2);
  EXPECT_EQ(run_cli({"check", file("pack.pt"), "--layers", "nothing-matches"}).exit_code, 2);
}

TEST_F(OmegaCheck, UsageErrorsExitTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"check", file("pack.pt"), "--step", "3"},  // T = 3 for q_proj: steps 0..2
           {"check", file("pack.pt"), "--layer", "no.such.layer"},
           {"check", file("pack.pt"), "--mode", "kernel"},
           {"check", file("pack.pt"), "--min-artifact-cos", "0.9"},
           {"check", file("pack.pt"), "--tokens", "0"},
       }) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

TEST_F(OmegaCheck, ArtifactGemmUsesTheStoredBytesAndGates) {
  const auto emu = json_of(run_cli({"check", file("pack.pt"), "--s1", "--json"}));
  const auto none =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_none.pt"), "--json"}));
  // fold none: the stored B is e0m3(W), activations e0m3(x2): exactly S0.
  EXPECT_EQ(none["variants"][0]["global_cos"], emu["variants"][1]["global_cos"]);
  EXPECT_EQ(none["artifact_bytes_differing_from_pack"], 0);
  // fold mean: stored B = e0m3(W * mean s), activations e0m3(x2 / s_t): exactly S1.
  const auto mean =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_mean.pt"), "--json"}));
  EXPECT_EQ(mean["variants"][0]["global_cos"], emu["variants"][2]["global_cos"]);
  // Every layer of the artifact can be checked.
  const auto gate = run_cli({"check", file("pack.pt"), "--artifact", file("art_none.pt"), "--layer",
                             "paligemma_with_expert.paligemma.model.language_model.layers.0.mlp."
                             "gate_proj",
                             "--min-artifact-cos", "0.98"});
  EXPECT_EQ(gate.exit_code, 0) << gate.err;
  EXPECT_NE(gate.out.find("pass"), std::string::npos) << gate.out;
  // A gate above what 4 bits reach fails with exit 1.
  const auto high = run_cli({"check", file("pack.pt"), "--artifact", file("art_none.pt"),
                             "--min-artifact-cos", "0.99999"});
  EXPECT_EQ(high.exit_code, 1) << high.err;
  EXPECT_NE(high.err.find("below --min-artifact-cos"), std::string::npos) << high.err;
}

TEST_F(OmegaCheck, DamagedOrInconsistentArtifactsAreRejected) {
  struct Case {
    const char* action;
    int exit_code;
    const char* message;
  };
  for (const Case& c : {Case{"zero_packed", 1, "below --min-artifact-cos"},
                        Case{"drop_aux", 2, "coverage mismatch"},
                        Case{"packed_shape", 2, "packed must be uint8 (256, 64)"},
                        Case{"fold_mismatch", 2, "fold must equal the artifact's fold"},
                        Case{"bad_format", 2, "format must be \"omega_e0m3_v1\""}}) {
    const std::string out = file(std::string("bad_") + c.action + ".pt");
    ASSERT_EQ(
        testing::run_test_python("edit_e0m3_artifact.py", {file("art_none.pt"), out, c.action, kQ}),
        0);
    const auto r = run_cli({"check", file("pack.pt"), "--artifact", out});
    EXPECT_EQ(r.exit_code, c.exit_code) << c.action << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.action << ": " << r.err;
  }
}

TEST_F(OmegaCheck, ConvertIsIdenticalForAnyThreadCount) {
  for (const char* threads : {"1", "3"}) {
    const auto r = run_cli({"convert", file("pack.pt"), "--to", "e0m3-sfb", "--threads", threads,
                            "-o", file(std::string("thr") + threads + ".pt")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(testing::read_bytes(file(std::string("thr") + threads + ".pt")),
              testing::read_bytes(file("art_none.pt")))
        << threads;
  }
}

// --fold actnorm against the converter's torch computation (tests/python/actnorm_reference.py):
// act_scale_static bit for bit, act_out_scale within a few ulp, at most 1e-3 of the folded
// weights different (none where act_out_scale agrees; torch's own last bit depends on the CPU); the
// artifact loads with weights_only on torch 1.13 (act_out_scale a 0-d tensor) and its GEMM gates:
// fp16(x2 / static) against the stored B, times alpha = act_out_scale.
TEST_F(OmegaCheck, ActnormFoldMatchesTorchAndItsArtifactGates) {
  EXPECT_EQ(
      testing::run_test_python("actnorm_reference.py", {file("pack.pt"), file("art_actnorm.pt")}),
      0);
  const auto none =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_none.pt"), "--json"}));
  const auto an =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_actnorm.pt"), "--json"}));
  EXPECT_EQ(an["artifact_bytes_differing_from_pack"], 0);
  // Folding the channel scales into W and out of x keeps the product: about S0's cosine.
  EXPECT_NEAR(an["variants"][0]["global_cos"].get<double>(),
              none["variants"][0]["global_cos"].get<double>(), 0.01);
  EXPECT_GT(an["variants"][0]["global_cos"].get<double>(), 0.98);
  // An actnorm artifact without its alpha is refused.
  const std::string bad = file("bad_actnorm.pt");
  ASSERT_EQ(testing::run_test_python("edit_e0m3_artifact.py",
                                     {file("art_actnorm.pt"), bad, "drop_act_out_scale", kQ}),
            0);
  const auto r = run_cli({"check", file("pack.pt"), "--artifact", bad});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("act_out_scale must be a float or a 0-d float32 tensor"), std::string::npos)
      << r.err;
}

// The default actnorm artifact stores act_out_scale as FlashRT does (a BINFLOAT Python float,
// which FlashRT's checker requires); --act-out-scale-tensor the same value as a 0-d tensor;
// everything else equal, and check --artifact gates both with the same numbers.
TEST_F(OmegaCheck, ActnormOutScaleIsAFloatByDefaultAndATensorOnRequest) {
  EXPECT_EQ(testing::run_test_python("actnorm_float.py",
                                     {file("art_actnorm_float.pt"), file("art_actnorm.pt")}),
            0);
  const auto t =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_actnorm.pt"), "--json"}));
  const auto f = json_of(
      run_cli({"check", file("pack.pt"), "--artifact", file("art_actnorm_float.pt"), "--json"}));
  EXPECT_EQ(f["variants"], t["variants"]);
  EXPECT_EQ(f["artifact_bytes_differing_from_pack"], 0);
  // The tensor form is an actnorm option of the .pt container only.
  for (const auto& extra :
       {std::vector<std::string>{"--fold", "none"},
        std::vector<std::string>{"--fold", "actnorm", "--format", "safetensors"}}) {
    std::vector<std::string> args = {"convert",       file("pack.pt"),          "--to",
                                     "e0m3-sfb",      "--act-out-scale-tensor", "-o",
                                     file("never.pt")};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--act-out-scale-tensor goes with --fold actnorm"), std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(file("never.pt")));
  }
}

// Artifacts of FlashRT's PR #179 converter carry no schema_version, counts or selected_layers:
// they gate by their tensors, and the report names what they lack; a count that is present
// must still be right.
TEST_F(OmegaCheck, ArtifactsWithoutSchemaFieldsGateAndSayWhatTheyLack) {
  const std::string pr = file("pr179.pt");
  ASSERT_EQ(
      testing::run_test_python("edit_e0m3_artifact.py", {file("art_none.pt"), pr, "pr179", kQ}), 0);
  const auto r = run_cli({"check", file("pack.pt"), "--artifact", pr});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: the artifact lacks schema_version, selected_layers, "
                       "selected_record_count"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("identical to qrepack's E0M3"), std::string::npos) << r.out;
  const auto all =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", pr, "--all", "--json"}));
  EXPECT_EQ(all["missing_metadata"].size(), 3u);
  EXPECT_EQ(all["layers"].size(), 4u);
  const auto full =
      json_of(run_cli({"check", file("pack.pt"), "--artifact", file("art_none.pt"), "--json"}));
  EXPECT_TRUE(full["missing_metadata"].empty());
  const std::string bad = file("bad_count.pt");
  ASSERT_EQ(testing::run_test_python("edit_e0m3_artifact.py",
                                     {file("art_none.pt"), bad, "bad_count", kQ}),
            0);
  const auto b = run_cli({"check", file("pack.pt"), "--artifact", bad});
  EXPECT_EQ(b.exit_code, 2) << b.err;
  EXPECT_NE(b.err.find("selected_record_count must equal the number of selected layers = 4"),
            std::string::npos)
      << b.err;
}

// A hand-derived fold: steps [[1, 4], [1, 4]] -> s = [1, 4]; mean(log s) = ln 2 -> c = 2 (to an
// ulp); r = fp16(s / c) = [0.5, 2]; W = [[1, 1]] -> [[0.5, 2]].
TEST(OmegaActnorm, ScalesAndFoldByHand) {
  const std::vector<float> table = {1, 4, 1, 4};
  const ActnormScales a = e0m3_actnorm_scales(table, 2, 2);
  EXPECT_EQ(a.static_scale, (std::vector<float>{1, 4}));
  EXPECT_NEAR(a.out_scale, 2.0f, 2.5e-7f);
  std::vector<std::uint16_t> w = {f16_encode(1.0f), f16_encode(1.0f)};
  e0m3_fold_actnorm(w, a, 1, 2);
  EXPECT_EQ(f16_decode(w[0]), 0.5f);
  EXPECT_EQ(f16_decode(w[1]), 2.0f);
  // A zero step mean is clamped at 1e-12 before the log.
  const std::vector<float> zero = {0, 1};
  EXPECT_EQ(e0m3_actnorm_scales(zero, 2, 1).static_scale[0], 1e-12f);
}

TEST_F(OmegaCheck, SafetensorsContainerHoldsTheSameContentAsThePt) {
  for (const char* fold : {"none", "mean", "actnorm"}) {
    const std::string pt = file(std::string("k_") + fold + ".pt");
    const std::string st = file(std::string("k_") + fold + ".safetensors");
    for (const auto& [out, format] : {std::pair{pt, "pt"}, std::pair{st, "safetensors"}}) {
      std::vector<std::string> args = {"convert", file("pack.pt"), "--to",     "e0m3-sfb", "--fold",
                                       fold,      "--keep-fp16",   "--format", format,     "-o",
                                       out};
      // The comparison loads the .pt with torch 1.13's weights_only: no Python float.
      if (std::string(fold) == "actnorm" && std::string(format) == "pt") {
        args.push_back("--act-out-scale-tensor");
      }
      const auto r = run_cli(args);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    EXPECT_EQ(testing::run_test_python("compare_e0m3_safetensors.py", {st, pt}), 0) << fold;
  }
  auto r = run_cli(
      {"convert", file("pack.pt"), "--to", "e0m3-sfb", "--format", "onnx", "-o", file("bad.x")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--format must be pt or safetensors"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(file("bad.x")));
}

}  // namespace
}  // namespace qrepack
