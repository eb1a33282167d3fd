// Model families and source encodings, end to end through the binary: every family fixture and
// every source encoding converts (convert -> check-load -> verify); the decoders are bit-exact
// against an independent numpy derivation (tests/python/source_encodings.py); the family table's
// refusals name what they refuse.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/fixtures/moe_fp8.h"
#include "qrepack/plan/convert_plan.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::poke_tensor_byte;
using testing::run_cli;
using testing::TempDir;

std::string fixture(const TempDir& d, const std::string& name, const std::string& encoding = "") {
  return testing::write_fixture(d, name, encoding);
}

// Whether `src`'s config.json names the GLM-MoE-DSA family (the fixture moe-fp8).
bool is_glm_source(const std::string& src) {
  std::ifstream f(fs::path(src) / "config.json");
  if (!f) return false;
  const auto j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() && j.value("model_type", std::string()) == "glm_moe_dsa";
}

// convert (which runs check-load on its output) then verify; returns the convert output.
std::string convert_and_verify(const std::string& src, const std::string& out,
                               const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"convert", src, "-o", out, "--to", "int4-g64"};
  // The GLM-style container: the target of GLM-MoE-DSA, asked for explicitly for the families
  // whose own runtimes load other containers (tests/targets_test.cc) or none.
  if (!is_glm_source(src)) {
    args.push_back("--target");
    args.push_back("generic");
  }
  args.insert(args.end(), extra.begin(), extra.end());
  const auto c = run_cli(args);
  EXPECT_EQ(c.exit_code, 0) << src << ": " << c.err;
  if (fs::exists(fs::path(src) / "config.json")) {  // check-load needs the config
    const auto l = run_cli({"check-load", out});
    EXPECT_EQ(l.exit_code, 0) << src << ": " << l.out << l.err;
  }
  const auto v = run_cli({"verify", src, out, "--json"});
  EXPECT_EQ(v.exit_code, 0) << src << ": " << v.err;
  if (v.exit_code == 0) {
    const auto j = nlohmann::json::parse(v.out);
    EXPECT_GT(j["tensors"].size(), 10u) << src;
    for (const auto& t : j["tensors"]) {
      EXPECT_GT(t["cosine"].get<double>(), 0.9) << src << " " << t["name"];
    }
  }
  return c.out;
}

TEST(Families, EveryFamilyFixtureConvertsLoadsAndVerifies) {
  TempDir d;
  for (std::string_view name : family_fixture_names()) {
    const std::string src = fixture(d, std::string(name));
    const auto cfg = family_fixture_config(name);
    const std::string out = convert_and_verify(src, src + "-out");
    EXPECT_NE(out.find(fmt::format("family: {}", family(cfg->family).name)), std::string::npos)
        << out;
    EXPECT_NE(out.find("coverage checked"), std::string::npos) << out;
    // The output holds exactly the family's main-pass tensors, in the engine's names.
    std::size_t expected = 0;
    for_each_model_weight(*cfg, [&](const ModelWeight& w) { expected += w.main_pass; });
    const auto ins = run_cli({"inspect", src + "-out", "--json"});
    ASSERT_EQ(ins.exit_code, 0);
    std::size_t weights = 0;
    const auto listing = nlohmann::json::parse(ins.out);
    for (const auto& t : listing["tensors"]) {
      weights += !t["name"].get<std::string>().ends_with(".qs");
    }
    EXPECT_EQ(weights, expected) << name;
  }
}

TEST(Families, MiniMaxNamesAreMappedToTheEngines) {
  TempDir d;
  const std::string src = fixture(d, "minimax");
  const auto ins = run_cli({"inspect", src, "--filter", "layers\\.1\\..*(block_sparse|w1)"});
  EXPECT_NE(ins.out.find("model.layers.1.block_sparse_moe.experts.0.w1.weight"), std::string::npos);
  // inspect's layout report names the family and the encodings.
  const auto all = run_cli({"inspect", src});
  EXPECT_NE(all.out.find("model: minimax (MiniMax"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("names mapped as MiniMax"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("source encodings: 18 bf16, 3 f32, 84 fp8-block"), std::string::npos)
      << all.out;
  convert_and_verify(src, src + "-out");
  const auto out = run_cli({"inspect", src + "-out", "--filter", "layers\\.1\\.mlp"});
  EXPECT_NE(out.out.find("model.layers.1.mlp.experts.0.gate_proj.weight"), std::string::npos);
  EXPECT_NE(out.out.find("model.layers.1.mlp.gate.e_score_correction_bias"), std::string::npos);
  EXPECT_EQ(out.out.find("block_sparse_moe"), std::string::npos);
}

TEST(Families, EverySourceEncodingConvertsLoadsAndVerifies) {
  TempDir d;
  for (const std::string e :
       {"fp8-block", "fp8-block-ue8m0", "fp8-block-bf16", "fp8-block-f16", "fp8-tensor",
        "nvfp4-modelopt", "nvfp4-ct", "bf16", "fp8-block32x32-ue8m0", "mxfp4", "mxfp4-deepseek",
        "int4-ct", "mlx-affine"}) {
    for (const char* f : {"llama", "deepseek-v3"}) {
      const std::string src = fixture(d, f, e);
      const std::string out = convert_and_verify(src, src + "-out");
      // Both namings of MXFP4 are one encoding.
      const std::string name = e == "mxfp4-deepseek" ? "mxfp4" : e;
      EXPECT_NE(out.find(fmt::format(" {}", name)), std::string::npos) << out;
    }
  }
}

// Counting the weights without keeping them (inspect) reports what keeping them would; the
// FP8-block weights are the file's F8_E4M3 tensors (an independent count).
TEST(Families, RecognitionCountsWithoutKeepingTheWeights) {
  TempDir d;
  for (const std::string e : {"fp8-block", "nvfp4-ct", "bf16"}) {
    const std::string src = fixture(d, "deepseek-v3", e);
    auto ck = Checkpoint::open(src);
    auto cfg = load_moe_config(src);
    ASSERT_TRUE(ck.ok() && cfg.ok()) << e;
    const MoeConfig* c = *cfg ? &**cfg : nullptr;
    auto kept = recognize_weights(*ck, c);
    auto counted = recognize_weights(*ck, c, RecognizeWeights::kCount);
    ASSERT_TRUE(kept.ok() && counted.ok()) << e;
    std::map<std::string, std::size_t> tally;
    for (const LogicalWeight& w : kept->weights) ++tally[source_encoding_name(w)];
    EXPECT_EQ(kept->encoding_counts, tally) << e;
    EXPECT_EQ(counted->encoding_counts, tally) << e;
    EXPECT_TRUE(counted->weights.empty()) << e;
    EXPECT_EQ(counted->weight_count, kept->weights.size()) << e;
    EXPECT_EQ(source_encodings_summary(*counted), source_encodings_summary(*kept)) << e;
    if (e == "fp8-block") {
      std::size_t fp8 = 0;
      for (const TensorRef t : ck->tensors()) fp8 += t.entry->dtype == Dtype::kF8E4M3;
      EXPECT_GT(fp8, 10u);
      EXPECT_EQ(tally["fp8-block"], fp8);
    }
  }
}

TEST(Families, DecodersAreBitExactAgainstAnIndependentDerivation) {
  TempDir d;
  for (const char* e : {"fp8-block", "fp8-block-ue8m0", "fp8-block-bf16", "fp8-block-f16",
                        "fp8-tensor", "nvfp4-modelopt", "nvfp4-ct", "fp8-block32x32-ue8m0", "mxfp4",
                        "mxfp4-deepseek", "int4-ct"}) {
    const std::string src = fixture(d, "minimax", e);
    const std::string out = src + "-f32";
    const auto c = run_cli({"convert", src, "-o", out, "--to", "f32", "--target", "generic"});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(testing::run_test_python("source_encodings.py", {src, out}), 0) << e;
  }
  // MLX affine (mlx-lm renames MiniMax's experts its own way): dense and stacked switch_mlp
  // experts, one module at 8 bits.
  for (const char* f : {"llama", "qwen3-moe"}) {
    const std::string src = fixture(d, f, "mlx-affine");
    const std::string out = src + "-f32";
    const auto c = run_cli({"convert", src, "-o", out, "--to", "f32", "--target", "generic"});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(testing::run_test_python("source_encodings.py", {src, out}), 0) << f;
  }
}

TEST(Families, KeptQuantizedWeightsTravelWithTheirSidecars) {
  // --unfuse-experts keeps every tensor bitwise: an NVFP4 or FP8 per-tensor source stays that
  // source, sidecars included, and decodes to the same values as the original.
  TempDir d;
  for (const char* e : {"nvfp4-ct", "nvfp4-modelopt", "fp8-tensor", "fp8-block-ue8m0"}) {
    const std::string src = fixture(d, "minimax", e);
    const std::string kept = src + "-kept";
    const auto k = run_cli(
        {"convert", src, "-o", kept, "--to", "bf16", "--unfuse-experts", "--target", "generic"});
    // Where the engine cannot load the kept encoding, the output is still written and
    // convert's check-load says so (exit 1, the gate's code) instead of calling it loadable.
    ASSERT_TRUE(fs::exists(fs::path(kept) / "qrepack.json")) << e << ": " << k.err;
    if (k.exit_code != 0) {
      EXPECT_EQ(k.exit_code, 1) << e << ": " << k.err;
      EXPECT_NE(k.err.find("rule check_load"), std::string::npos) << k.err;
    }
    const auto a =
        run_cli({"convert", src, "-o", src + "-f32", "--to", "f32", "--target", "generic"});
    const auto b =
        run_cli({"convert", kept, "-o", kept + "-f32", "--to", "f32", "--target", "generic"});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const auto ja = nlohmann::json::parse(std::ifstream(fs::path(src + "-f32") / "qrepack.json"));
    const auto jb = nlohmann::json::parse(std::ifstream(fs::path(kept + "-f32") / "qrepack.json"));
    std::map<std::string, std::string> hashes;
    for (const auto& o : ja["outputs"]) hashes[o["name"]] = o["xxhash64"];
    std::size_t same = 0;
    for (const auto& o : jb["outputs"]) {
      EXPECT_EQ(hashes[o["name"]], o["xxhash64"]) << e << " " << o["name"];
      ++same;
    }
    EXPECT_EQ(same, hashes.size()) << e;
  }
}

// --keep-mtp / --keep-indexer keep quantized weights as stored; the engine loads those only
// as fp8-block. Per-tensor FP8 and NVFP4 are refused by the plan, before any output exists,
// instead of by the check-load after it; --no-coverage-gate (no engine check) keeps them.
TEST(Families, KeepingWhatTheEngineCannotLoadIsRefusedBeforeAnyOutput) {
  TempDir d;
  for (const char* e : {"fp8-tensor", "nvfp4-modelopt", "nvfp4-ct"}) {
    const std::string src = fixture(d, "moe-fp8", e);
    const std::string out = src + "-kept";
    const auto r = run_cli({"convert", src, "-o", out, "--keep-mtp"});
    EXPECT_EQ(r.exit_code, 2) << e << ": " << r.err;
    EXPECT_NE(r.err.find("tensor 'model.layers.5.mlp.experts.0.gate_proj."), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(fmt::format("--keep-mtp keeps it as stored ({})", e)), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("rule keep.engine_loadable"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--keep-indexer"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << e;
    auto ck = Checkpoint::open(src);
    ASSERT_TRUE(ck.ok()) << e;
    ConvertOptions keep_mtp;
    keep_mtp.keep_mtp = true;
    const auto plan = plan_conversion(*ck, keep_mtp);
    ASSERT_FALSE(plan.ok()) << e;
    EXPECT_EQ(plan.error().kind(), ErrorKind::kUnloadableLayout) << e;
    const auto i = run_cli({"convert", src, "-o", out, "--keep-indexer"});
    EXPECT_EQ(i.exit_code, 2) << e;
    EXPECT_NE(i.err.find("convert it with --indexer in a run of its own"), std::string::npos);
    EXPECT_FALSE(fs::exists(out)) << e;
    const auto k = run_cli({"convert", src, "-o", out, "--keep-mtp", "--no-coverage-gate"});
    EXPECT_EQ(k.exit_code, 0) << e << ": " << k.err;
  }
  const std::string block = fixture(d, "moe-fp8", "fp8-block-ue8m0");
  const auto k = run_cli({"convert", block, "-o", block + "-kept", "--keep-mtp", "--keep-indexer"});
  EXPECT_EQ(k.exit_code, 0) << k.err;
  EXPECT_NE(k.out.find("fp8-block"), std::string::npos) << k.out;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

TEST(Families, LlamaConvertsWithAndWithoutConfigJson) {
  TempDir d;
  const std::string src = fixture(d, "llama");
  convert_and_verify(src, src + "-a");
  fs::remove(fs::path(src) / "config.json");
  const auto refused = run_cli({"convert", src, "-o", src + "-b"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--no-coverage-gate"), std::string::npos);
  const std::string out = convert_and_verify(src, src + "-c", {"--no-coverage-gate"});
  EXPECT_NE(out.find("name rules alone, no coverage checked"), std::string::npos) << out;
}

TEST(Families, UnknownModelTypeNamesTheKnownFamilies) {
  TempDir d;
  const std::string src = fixture(d, "llama");
  const std::string cfg = (fs::path(src) / "config.json").string();
  auto j = nlohmann::json::parse(std::ifstream(cfg));
  j["model_type"] = "gpt_neox";
  write_json(cfg, j);
  const auto r = run_cli({"convert", src, "-o", src + "-x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model_type \"gpt_neox\" is not a family qrepack knows"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("qwen3_moe"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(src + "-x"));
  // With the gate off it converts by name rules and says so.
  const auto ok = run_cli({"convert", src, "-o", src + "-y", "--no-coverage-gate"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("converting by name rules alone"), std::string::npos) << ok.err;
  const auto m = nlohmann::json::parse(std::ifstream(fs::path(src + "-y") / "qrepack.json"));
  EXPECT_EQ(m["parameters"]["coverage_gate"], false);
  EXPECT_TRUE(m["source"]["family"].is_null());
  EXPECT_EQ(m["source"]["coverage_checked"], false);
  ASSERT_EQ(m["source"]["warnings"].size(), 1u);
}

TEST(Families, Nvfp4ConventionMustBeStatedByTheConfig) {
  TempDir d;
  const std::string src = fixture(d, "llama", "nvfp4-ct");
  const std::string cfg = (fs::path(src) / "config.json").string();
  auto j = nlohmann::json::parse(std::ifstream(cfg));
  j["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  write_json(cfg, j);
  auto r = run_cli({"convert", src, "-o", src + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("rule nvfp4.convention"), std::string::npos) << r.err;
  j.erase("quantization_config");
  write_json(cfg, j);
  r = run_cli({"convert", src, "-o", src + "-x", "--target", "generic"});
  EXPECT_NE(r.err.find("does not guess it"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(src + "-x"));
}

TEST(Families, SwizzledNvfp4ScalesAreRefused) {
  // A scale padded to 128 rows (the swizzled layout's shape) is not [O, I/16].
  TempDir d;
  const std::string src = fixture(d, "llama", "nvfp4-modelopt");
  const auto ins = run_cli({"inspect", src, "--json"});
  const auto j = nlohmann::json::parse(ins.out);
  std::string shard;
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "model.layers.0.mlp.up_proj.weight_scale") shard = t["shard"];
  }
  ASSERT_FALSE(shard.empty());
  // Rewrite the header's shape of that tensor in place: [128, 4] -> [64, 8] keeps the bytes.
  const std::string path = (fs::path(src) / shard).string();
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const std::string from =
      "\"model.layers.0.mlp.up_proj.weight_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[128,4]";
  const auto p = bytes.find(from);
  ASSERT_NE(p, std::string::npos);
  bytes.replace(p + from.size() - 7, 7, "[64, 8]");
  f.seekp(0);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  const auto r = run_cli({"convert", src, "-o", src + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("swizzled or padded scale layouts are refused"), std::string::npos) << r.err;
}

TEST(Families, NegativeOrNanNvfp4BlockScalesAreRefused) {
  TempDir d;
  for (std::uint8_t bad : {std::uint8_t{0xB8}, std::uint8_t{0x7F}}) {
    const std::string src = fixture(d, "llama", "nvfp4-modelopt");
    poke_tensor_byte(src, "model.layers.1.mlp.down_proj.weight_scale", 5, bad);
    const auto r = run_cli({"convert", src, "-o", src + "-x", "--target", "generic"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("rule nvfp4.scale_valid"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("model.layers.1.mlp.down_proj.weight_scale"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(src + "-x"));
    fs::remove_all(src);
  }
}

TEST(Families, BadPerTensorUe8m0AndBf16ScalesAreRefusedBeforeAnyWeightIsRead) {
  TempDir d;
  const std::string t = fixture(d, "llama", "fp8-tensor");
  poke_tensor_byte(t, "model.layers.0.self_attn.q_proj.weight_scale", 3, 0xFF);  // -NaN
  auto r = run_cli({"convert", t, "-o", t + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.layers.0.self_attn.q_proj.weight_scale"), std::string::npos) << r.err;
  const std::string u = fixture(d, "llama", "fp8-block-ue8m0");
  poke_tensor_byte(u, "model.layers.0.mlp.up_proj.weight_scale_inv", 0, 0xFF);  // UE8M0 NaN
  r = run_cli({"convert", u, "-o", u + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fp8_block.scale_positive"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(u + "-x"));
  // 2^127 is a valid UE8M0 scale, but 448 times it is not a finite f32.
  poke_tensor_byte(u, "model.layers.0.mlp.up_proj.weight_scale_inv", 0, 0xFE);
  r = run_cli({"convert", u, "-o", u + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("at most 2^119"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(u + "-x"));
  // A BF16 scale's sign is bit 7 of its second (high) byte.
  const std::string b = fixture(d, "llama", "fp8-block-bf16");
  poke_tensor_byte(b, "model.layers.0.mlp.up_proj.weight_scale_inv", 1, 0xBF);
  r = run_cli({"convert", b, "-o", b + "-x", "--target", "generic"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("model.layers.0.mlp.up_proj.weight_scale_inv"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fp8_block.scale_positive"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(b + "-x"));
}

}  // namespace
}  // namespace qrepack
