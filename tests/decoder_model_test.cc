// The decoder families' reference forward passes (Llama, Qwen3, Qwen3-MoE, OLMoE, the Qwen3.5 /
// 3.6 hybrid), their oracles in each runtime's schema and eval on every target's container:
// against an independent torch implementation (tests/python/decoder_reference.py), across
// thread counts, and with the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

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

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// sha256sum's digest of `file` (coreutils, independent of qrepack's).
std::string sha256sum(const fs::path& file, const fs::path& tmp) {
  const fs::path out = tmp / "sha.txt";
  const std::string cmd = "sha256sum '" + file.string() + "' > '" + out.string() + "'";
  if (std::system(cmd.c_str()) != 0) return "";
  const auto b = read_bytes(out);
  return std::string(b.begin(), b.begin() + std::min<std::size_t>(64, b.size()));
}

struct Family {
  const char* fixture;
  const char* ref_file;
};
constexpr Family kFamilies[] = {{"llama", "ref_llama.json"},
                                {"qwen3", "ref.json"},
                                {"qwen3-moe", "ref_qwen36.json"},
                                {"olmoe", "ref_olmoe.json"},
                                {"qwen36", "ref_qwen36.json"}};

class DecoderModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const Family& f : kFamilies) {
      const auto r = run_cli({"fixture", f.fixture, "--oracle", "-o", src(f.fixture)});
      ASSERT_EQ(r.exit_code, 0) << f.fixture << ": " << r.err;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string src(const std::string& name) { return (*dir_ / name).string(); }
  TempDir tmp;
  static TempDir* dir_;
};
TempDir* DecoderModel::dir_ = nullptr;

// The oracle's logits, its argmaxes and its greedy continuation, each recomputed by torch.
void expect_torch_agrees(const std::string& ck, const fs::path& tmp,
                         const std::vector<std::string>& extra = {}) {
  const auto ref = (tmp / "r.json").string(), logits = (tmp / "l.npy").string();
  std::vector<std::string> args = {"oracle", ck, "-o", ref, "--logits", logits};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = read_json(ref);
  std::vector<std::string> py = {ck, joined_ids(j["full_ids"]),
                                 std::to_string(j["prompt_ids"].size()), logits};
  if (std::find(extra.begin(), extra.end(), "attention_only") != extra.end()) {
    py.insert(py.begin(), "--attention-only");
  }
  EXPECT_EQ(run_test_python("decoder_reference.py", py), 0)
      << ck << ": needs Debian's python3-torch (make test installs it)";
}

TEST_F(DecoderModel, EveryFamilyMatchesAnIndependentTorchImplementation) {
  for (const Family& f : kFamilies) expect_torch_agrees(src(f.fixture), tmp.path());
  // The hybrid's attention_only mode, and its FP8 release encoding's decoded weights.
  expect_torch_agrees(src("qwen36"), tmp.path(), {"--mode", "attention_only"});
  const auto fp8 = (tmp / "fp8").string();
  ASSERT_EQ(run_cli({"fixture", "qwen3-moe", "--encoding", "fp8-block-bf16", "-o", fp8}).exit_code,
            0);
  expect_torch_agrees(fp8, tmp.path());
}

// Rope variants the families use, on the llama fixture's weights: llama3 scaling and partial
// rotary, each also moving the logits.
TEST_F(DecoderModel, RopeVariantsMatchTorch) {
  const fs::path ck = tmp / "llama3";
  fs::copy(src("llama"), ck);
  auto cfg = read_json(ck / "config.json");
  cfg["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
  cfg["rope_theta"] = 500000.0;
  testing::write_text(ck / "config.json", cfg.dump());
  expect_torch_agrees(ck.string(), tmp.path(), {"--new-tokens", "24"});
  cfg["partial_rotary_factor"] = 0.5;
  testing::write_text(ck / "config.json", cfg.dump());
  expect_torch_agrees(ck.string(), tmp.path(), {"--new-tokens", "24"});
  const auto a = run_cli({"eval", src("llama"), ck.string(), "--json", "--length", "24"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_GT(nlohmann::json::parse(a.out)["kl_mean"].get<double>(), 0.0);
}

TEST_F(DecoderModel, FixtureOraclesFollowTheirRuntimesSchemas) {
  for (const Family& f : kFamilies) {
    const auto j = read_json(fs::path(src(f.fixture)) / f.ref_file);
    EXPECT_EQ(j["prompt_ids"], nlohmann::json::array({1, 2, 3, 4, 5})) << f.fixture;
    const auto ref = (tmp / "again.json").string();
    ASSERT_EQ(run_cli({"oracle", src(f.fixture), "-o", ref}).exit_code, 0);
    EXPECT_EQ(read_bytes(ref), read_bytes(fs::path(src(f.fixture)) / f.ref_file)) << f.fixture;
  }
  // make_llama_oracle.py's 13 fields, in its order; the shards' sha256s are the source files'.
  const auto llama = read_json(fs::path(src("llama")) / "ref_llama.json");
  std::vector<std::string> keys;  // in the file's order (nlohmann::json sorts its keys)
  const auto raw = read_bytes(fs::path(src("llama")) / "ref_llama.json");
  const auto ordered = nlohmann::ordered_json::parse(raw.begin(), raw.end());
  for (const auto& [k, v] : ordered.items()) {
    keys.push_back(k);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"repo", "revision", "shards", "prompt", "prompt_ids",
                                            "n_new", "generated_ids", "full_ids", "compute_dtype",
                                            "decoding", "transformers", "torch", "text"}));
  EXPECT_EQ(llama["n_new"], 64);
  EXPECT_EQ(llama["full_ids"].size(), 69u);
  EXPECT_EQ(llama["generated_ids"][0], llama["full_ids"][5]);
  EXPECT_EQ(llama["decoding"], "greedy");
  EXPECT_EQ(llama["compute_dtype"], "float32");
  ASSERT_FALSE(llama["shards"].empty());
  for (const auto& [file, sha] : llama["shards"].items()) {
    EXPECT_EQ(sha256sum(fs::path(src("llama")) / file, tmp.path()), sha.get<std::string>()) << file;
  }
  // make_qwen3_tiny.py / make_qwen36_tiny.py: {prompt_ids, full_ids, mode, model}.
  const auto q36 = read_json(fs::path(src("qwen36")) / "ref_qwen36.json");
  EXPECT_EQ(q36.size(), 4u);
  EXPECT_EQ(q36["mode"], "full");
  EXPECT_EQ(q36["full_ids"].size(), 21u);
  EXPECT_EQ(read_json(fs::path(src("qwen3")) / "ref.json")["mode"], "full");
  EXPECT_EQ(read_json(fs::path(src("olmoe")) / "ref_olmoe.json").size(), 2u);
  EXPECT_EQ(read_json(fs::path(src("olmoe")) / "ref_olmoe.json")["full_ids"].size(), 17u);
  // attention_only changes the reference (the DeltaNet layers are skipped).
  const auto ao = (tmp / "ao.json").string();
  ASSERT_EQ(run_cli({"oracle", src("qwen36"), "-o", ao, "--mode", "attention_only"}).exit_code, 0);
  EXPECT_EQ(read_json(ao)["mode"], "attention_only");
  const auto full_l = (tmp / "f.npy").string(), ao_l = (tmp / "a.npy").string();
  ASSERT_EQ(run_cli({"oracle", src("qwen36"), "-o", ao, "--logits", full_l}).exit_code, 0);
  ASSERT_EQ(
      run_cli({"oracle", src("qwen36"), "-o", ao, "--logits", ao_l, "--mode", "attention_only"})
          .exit_code,
      0);
  EXPECT_NE(read_bytes(full_l), read_bytes(ao_l));
}

TEST_F(DecoderModel, OracleIsByteIdenticalForAnyThreadCount) {
  for (const char* f : {"qwen36", "olmoe"}) {
    testing::expect_oracle_same_for_any_thread_count(src(f), tmp.path());
  }
}

double eval_kl(const std::string& a, const std::string& b, double* top1 = nullptr) {
  const auto r = run_cli({"eval", a, b, "--json", "--sequences", "4", "--length", "24"});
  EXPECT_EQ(r.exit_code, 0) << b << ": " << r.err;
  if (r.exit_code != 0) return 1e9;
  const auto j = nlohmann::json::parse(r.out);
  if (top1) *top1 = j["top1_agreement"].get<double>();
  return j["kl_mean"].get<double>();
}

// eval reads every target's container: merged expert blobs (int8, two's-complement nibbles,
// the mixed slab), 2-D grouped int4, F16 residents. A misread layout would scramble the
// model, so agreement must be high and rank with the bits.
TEST_F(DecoderModel, EvalReadsEveryTargetsContainer) {
  struct Case {
    const char* fixture;
    std::vector<std::string> flags;
    double max_kl, min_top1;
  };
  // Measured: int8 and f16 agree at >= 0.97 with KL < 1e-3; int4 at about 0.89 with KL about
  // 0.1. A misread layout (nibble sign, scale order, group size) scrambles the model.
  const std::vector<Case> cases = {
      {"llama", {}, 0.0, 1.0},  // staged unchanged
      {"qwen3", {"--to", "f16"}, 1e-4, 1.0},
      {"qwen3", {}, 0.25, 0.8},   // int4-g64, 2-D U8 + .qs
      {"olmoe", {}, 2e-3, 0.95},  // merged int8 experts
      {"qwen36", {"--to", "int8-row"}, 5e-3, 0.95},
      {"qwen36", {"--bits", "experts=4,down=8"}, 0.25, 0.8},  // the mixed slab
      {"qwen36", {}, 0.25, 0.8},                              // two's-complement nibbles per row
      {"qwen36", {"--to", "int4-g32"}, 0.25, 0.8},
      {"qwen3-moe", {"--to", "int8-row"}, 2e-3, 0.95},
      // The GLM-style container of a decoder family (U8 + .qs per projection).
      {"qwen3", {"--target", "generic", "--to", "int8-row"}, 5e-3, 0.95},
      {"llama", {"--target", "generic"}, 0.25, 0.8},  // int4-row, io int8
  };
  std::map<std::string, double> kl;
  int n = 0;
  for (const Case& c : cases) {
    const auto out = (tmp / ("o" + std::to_string(n++))).string();
    std::vector<std::string> args = {"convert", src(c.fixture), "-o", out};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << c.fixture << ": " << r.err;
    double top1 = 0;
    const double k = eval_kl(src(c.fixture), out, &top1);
    EXPECT_LE(k, c.max_kl) << c.fixture << " " << join(c.flags);
    EXPECT_GE(top1, c.min_top1) << c.fixture << " " << join(c.flags);
    kl[std::string(c.fixture) + join(c.flags)] = k;
  }
  EXPECT_LT(kl["qwen36--to int8-row"] * 10, kl["qwen36"]);  // 8 bits beat 4 at the model level
  EXPECT_LT(kl["qwen3--to f16"] * 10, kl["qwen3"]);
}

// Tied embeddings (Qwen3-0.6B, Qwen2-0.5B): no lm_head is stored and the vocab projection is
// the embedding. The pass agrees with torch's tied model; colibri-qwen3 writes no lm_head (its
// runtime then projects through the embedding) and its container evaluates as the source.
TEST_F(DecoderModel, TiedEmbeddingsProjectThroughTheEmbedding) {
  const fs::path tied = tmp / "tied";
  ASSERT_EQ(run_test_python("tie_embeddings.py", {src("qwen3"), tied.string()}), 0);
  expect_torch_agrees(tied.string(), tmp.path());
  const auto out = (tmp / "c").string();
  const auto r = run_cli({"convert", tied.string(), "-o", out, "--to", "f16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto globals = read_bytes(fs::path(out) / "model-globals.safetensors");
  const std::string text(globals.begin(), globals.end());
  EXPECT_EQ(text.find("lm_head"), std::string::npos);
  EXPECT_NE(text.find("model.embed_tokens.weight"), std::string::npos);
  double top1 = 0;
  EXPECT_LE(eval_kl(tied.string(), out, &top1), 1e-4);
  EXPECT_EQ(top1, 1.0);
  // The untied source's own head is not the embedding: the two models' logits differ.
  EXPECT_GT(eval_kl(src("qwen3"), tied.string()), 1e-3);
}

TEST_F(DecoderModel, RefusalsNameTheVariantAndWriteNothing) {
  const fs::path ck = tmp / "edited";
  fs::copy(src("llama"), ck);
  auto cfg = read_json(ck / "config.json");
  cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  testing::write_text(ck / "config.json", cfg.dump());
  auto r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rope type \"yarn\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.json"));
  // A stored shape the config does not imply is named before anything is computed.
  cfg.erase("rope_scaling");
  cfg["intermediate_size"] = 96;
  testing::write_text(ck / "config.json", cfg.dump());
  r = run_cli({"oracle", ck.string(), "-o", (tmp / "x.json").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mlp.gate_proj.weight"), std::string::npos) << r.err;
  // attention_only is the hybrid's mode only.
  r = run_cli(
      {"oracle", src("olmoe"), "-o", (tmp / "x.json").string(), "--mode", "attention_only"});
  EXPECT_EQ(r.exit_code, 2);
  // A family without a forward pass: its fixture's --oracle refuses and publishes nothing.
  r = run_cli({"fixture", "mistral", "--oracle", "-o", (tmp / "m").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("forward.support"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "m"));
  // A DeltaNet layer whose value heads do not share key heads evenly.
  const fs::path hy = tmp / "hybrid";
  fs::copy(src("qwen36"), hy);
  auto hc = read_json(hy / "config.json");
  hc["text_config"]["linear_num_value_heads"] = 3;
  testing::write_text(hy / "config.json", hc.dump());
  r = run_cli({"eval", hy.string(), hy.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("linear_num_value_heads 3"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qrepack
