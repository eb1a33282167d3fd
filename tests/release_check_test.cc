// The families the engine runs as downloaded (targets/release_check.h): each release fixture
// passes check-load; a missing tensor, a wrong dtype, a wrong scale shape, a missing config
// key and a missing side file each fail naming the entry; convert refuses in one line and
// writes nothing; inspect names the family.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;
using Json = nlohmann::ordered_json;

fs::path make_fixture(const TempDir& tmp, const std::string& kind) {
  const fs::path out = tmp / kind;
  const auto r = run_cli({"fixture", kind, "-o", out.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

Json read_json(const fs::path& p) {
  const auto bytes = testing::read_bytes(p);
  return Json::parse(bytes.begin(), bytes.end());
}

// The shard holding `name` (from the index, else the single file).
fs::path shard_of(const fs::path& dir, const std::string& name) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) return dir / "model.safetensors";
  return dir / read_json(index)["weight_map"][name].get<std::string>();
}

// Rewrites a shard's header through `edit` (the data bytes stay where they are).
void edit_header(const fs::path& shard, const std::function<void(Json&)>& edit) {
  auto bytes = testing::read_bytes(shard);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  Json h = Json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  edit(h);
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::vector<std::uint8_t> out(8);
  const std::uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  testing::write_bytes(shard, out);
}

void rename_tensor(const fs::path& dir, const std::string& from, const std::string& to) {
  const fs::path shard = shard_of(dir, from);
  edit_header(shard, [&](Json& h) {
    h[to] = h[from];
    h.erase(from);
  });
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) return;
  Json j = read_json(index);
  j["weight_map"][to] = j["weight_map"][from];
  j["weight_map"].erase(from);
  testing::write_text(index, j.dump(2));
}

void set_entry(const fs::path& dir, const std::string& name, const char* field, const Json& v) {
  edit_header(shard_of(dir, name), [&](Json& h) { h[name][field] = v; });
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct Case {
  const char* fixture;
  const char* runtime;
};
constexpr Case kCases[] = {{"deepseek-v4", "c/deepseek_v4.c"},
                           {"deepseek-v41", "c/deepseek_v41.c"},
                           {"mimo-v2", "c/mimo.c"},
                           {"qwen38-fp8", "c/qwen38.c"}};

TEST(ReleaseCheck, EachFixturePassesCheckLoad) {
  TempDir tmp;
  for (const Case& c : kCases) {
    const fs::path dir = make_fixture(tmp, c.fixture);
    const auto r = run_cli({"check-load", dir.string()});
    EXPECT_EQ(r.exit_code, 0) << c.fixture << "\n" << r.out << r.err;
    EXPECT_TRUE(has(r.out, fmt::format("check-load ({},", c.runtime))) << r.out;
    EXPECT_TRUE(has(r.out, "0 missing tensors, 0 unloadable")) << r.out;
  }
}

TEST(ReleaseCheck, MissingTensorIsNamed) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v41");
  rename_tensor(dir, "layers.2.attn.wkv.scale", "layers.2.attn.wkv.scalx");
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "1 missing tensors")) << r.out;
  EXPECT_TRUE(has(r.out, "missing layers.2.attn.wkv.scale\n")) << r.out;
}

TEST(ReleaseCheck, WrongDtypeIsNamed) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v4");
  set_entry(dir, "head.weight", "dtype", "F16");  // same bytes; a BF16 decode would misread it
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "unloadable head.weight: dtype F16, the loader reads BF16")) << r.out;
}

TEST(ReleaseCheck, WrongScaleShapeIsNamed) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v41");
  // wq_a [64, 128] has a [2, 4] tile grid; [4, 2] holds the same bytes.
  set_entry(dir, "layers.0.attn.wq_a.scale", "shape", Json::array({4, 2}));
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out,
                  "unloadable layers.0.attn.wq_a.scale: shape [4, 2], the loader reads "
                  "[2, 4]"))
      << r.out;
}

TEST(ReleaseCheck, MissingConfigKeyIsNamed) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "mimo-v2");
  Json c = read_json(dir / "config.json");
  c.erase("moe_intermediate_size");
  testing::write_text(dir / "config.json", c.dump(2));
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "config.json: missing or non-numeric \"moe_intermediate_size\"")) << r.out;
}

// deepseek_v4.c's config parser requires these keys (the fixture carries them, as the release
// does); without any of them the runtime refuses the checkpoint.
TEST(ReleaseCheck, DeepseekV4RuntimeConfigKeysAreRequired) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v4");
  Json c = read_json(dir / "config.json");
  for (const char* k :
       {"expert_dtype", "scoring_func", "topk_method", "routed_scaling_factor", "swiglu_limit",
        "rope_theta", "compress_rope_theta", "hc_eps", "num_nextn_predict_layers", "rope_scaling",
        "quantization_config", "n_shared_experts"}) {
    ASSERT_TRUE(c.contains(k)) << k;
  }
  EXPECT_EQ(c["expert_dtype"], "fp4");
  EXPECT_TRUE(c["rope_scaling"].contains("original_max_position_embeddings"));
  c.erase("expert_dtype");
  c["scoring_func"] = "softmax";
  c.erase("swiglu_limit");
  c["rope_scaling"].erase("beta_fast");
  testing::write_text(dir / "config.json", c.dump(2));
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "config.json: expert_dtype must be \"fp4\"")) << r.out;
  EXPECT_TRUE(has(r.out, "config.json: scoring_func must be \"sqrtsoftplus\"")) << r.out;
  EXPECT_TRUE(has(r.out, "config.json: missing number swiglu_limit")) << r.out;
  EXPECT_TRUE(has(r.out, "\"beta_fast\"")) << r.out;
}

TEST(ReleaseCheck, DeepseekV4HashTableMustBeI64) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v4");
  // The same bytes as I32 [vocab, 2 * top_k]: deepseek_v4.c reads the table as int64.
  set_entry(dir, "layers.0.ffn.gate.tid2eid", "dtype", "I32");
  set_entry(dir, "layers.0.ffn.gate.tid2eid", "shape", Json::array({256, 4}));
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "unloadable layers.0.ffn.gate.tid2eid: dtype I32")) << r.out;
}

TEST(ReleaseCheck, MissingSideFileIsNamedWithItsCommand) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "deepseek-v41");
  fs::remove(dir / "dsv41_engram.json");
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "dsv41_engram.json: missing")) << r.out;
  EXPECT_TRUE(has(r.out, "prepare_dsv41.py --model")) << r.out;
}

TEST(ReleaseCheck, ConvertRefusesInOneLineAndWritesNothing) {
  TempDir tmp;
  for (const Case& c : kCases) {
    if (std::string(c.fixture) == "qwen38-fp8") continue;  // keeps its int4 overlay target
    const fs::path dir = make_fixture(tmp, c.fixture);
    const fs::path out = tmp / (std::string(c.fixture) + "-out");
    for (const std::vector<std::string>& extra :
         {std::vector<std::string>{}, std::vector<std::string>{"--target", "generic"}}) {
      std::vector<std::string> args = {"convert", dir.string(), "-o", out.string()};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = run_cli(args);
      EXPECT_EQ(r.exit_code, 2) << c.fixture << r.out << r.err;
      EXPECT_TRUE(has(r.err, "no conversion needed")) << r.err;
      EXPECT_TRUE(has(r.err, c.runtime)) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_FALSE(fs::exists(out));
    }
  }
}

TEST(ReleaseCheck, Qwen38ConvertsToTheRuntimesSidecarByDefault) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "qwen38-fp8");
  const auto r = run_cli({"convert", dir.string(), "-o", (tmp / "sidecar").string(), "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "colibri-qwen38-experts-int4g64")) << r.out;
}

// Qwen3.8 as c/qwen38_core.h @04ee7453 loads it: both releases (fused BF16 experts and one
// n-gram table; per-expert FP8 and a sharded FP8 table) pass; each refusal names its entry.
constexpr const char* kQ38 = "model.language_model.layers.1.";

TEST(ReleaseCheck, Qwen38BothReleasesPass) {
  TempDir tmp;
  for (const char* kind : {"qwen38", "qwen38-fp8"}) {
    const auto r = run_cli({"check-load", make_fixture(tmp, kind).string()});
    EXPECT_EQ(r.exit_code, 0) << kind << "\n" << r.out << r.err;
    EXPECT_TRUE(has(r.out, "0 missing tensors, 0 unloadable")) << r.out;
  }
}

TEST(ReleaseCheck, Qwen38MissingHyperConnectionIsNamed) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "qwen38");
  const std::string name = std::string(kQ38) + "mlp_hyper_connection.block_inject_weight.weight";
  rename_tensor(dir, name, "model.visual.unused.weight");
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "1 missing tensors")) << r.out;
  EXPECT_TRUE(has(r.out, "missing " + name + "\n")) << r.out;
}

// The sparse-attention q_proj holds the query and its output gate: [2 * heads * head_dim, H].
TEST(ReleaseCheck, Qwen38UngatedQProjIsRefused) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "qwen38-fp8");
  const std::string q = std::string(kQ38) + "self_attn.q_proj.weight";
  rename_tensor(dir, q, "model.visual.unused.weight");
  rename_tensor(dir, "mtp.layers.0.self_attn.q_proj.weight", q);  // [heads * head_dim, H]
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "unloadable " + q + ": shape [64, 192], the loader reads [128, 192]"))
      << r.out;
}

TEST(ReleaseCheck, Qwen38EosListIsRefused) {
  TempDir tmp;
  const fs::path dir = make_fixture(tmp, "qwen38");
  Json c = read_json(dir / "config.json");
  c["text_config"]["eos_token_id"] = Json::array({2, 3});
  testing::write_text(dir / "config.json", c.dump(2));
  const auto r = run_cli({"check-load", dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "config.json: \"eos_token_id\" must be numeric (a single number)"))
      << r.out;
}

// st.h indexes BF16/F16/F32/U8/I8/F8_E4M3/F8_E8M0/I64/U64 only: a tensor it cannot index,
// even one the loader never reads, stops the whole directory.
TEST(ReleaseCheck, Qwen38UnindexableDtypeIsRefused) {
  for (const auto& [dtype, n] : {std::pair{"I32", 4}, std::pair{"BOOL", 16}}) {
    TempDir tmp;
    const fs::path dir = make_fixture(tmp, "qwen38");
    const std::string name = "model.visual.blocks.0.norm1.weight";  // BF16 [8]: 16 bytes
    set_entry(dir, name, "dtype", dtype);
    set_entry(dir, name, "shape", Json::array({n}));
    const auto r = run_cli({"check-load", dir.string()});
    EXPECT_EQ(r.exit_code, 1) << dtype << r.out << r.err;
    EXPECT_TRUE(has(r.out, fmt::format("unloadable {}: dtype {}: c/st.h refuses the whole "
                                       "directory",
                                       name, dtype)))
        << r.out;
  }
}

TEST(ReleaseCheck, InspectNamesTheFamily) {
  TempDir tmp;
  for (const Case& c : kCases) {
    const fs::path dir = make_fixture(tmp, c.fixture);
    const auto r = run_cli({"inspect", dir.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(
        r.out, fmt::format("no conversion needed: {} runs these files as downloaded", c.runtime)))
        << r.out;
  }
}

}  // namespace
}  // namespace qrepack
