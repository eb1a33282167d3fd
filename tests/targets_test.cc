// The container targets end to end through the CLI: each family's fixture converts by default
// into the container its own runtime loads, every output byte equal to an independent numpy
// derivation of the upstream converter's rules (tests/python/container_targets.py), check-load
// passes as that runtime's loader checks, and bad input is refused before any output. Also:
// families no runtime loads are refused unless --target generic asks for them.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_json;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;
using testing::write_fixture;

struct Case {
  std::string fixture, target, checker;
  std::vector<std::string> flags;  ///< convert flags
  std::vector<std::string> check;  ///< the same, in the checker's words
};

// Every target x its schemes: the output equals the independent derivation, byte for byte.
TEST(Targets, EveryTargetMatchesTheIndependentDerivation) {
  TempDir d;
  const std::vector<Case> cases = {
      {"qwen36", "colibri-qwen36", "qwen36", {}, {}},
      {"qwen36", "colibri-qwen36", "qwen36", {"--to", "int4-g32"}, {"--to", "int4-g32"}},
      {"qwen36", "colibri-qwen36", "qwen36", {"--to", "int8-row"}, {"--to", "int8-row"}},
      {"qwen36",
       "colibri-qwen36",
       "qwen36",
       {"--to", "int4-g32", "--bits", "down=8", "--down-group", "16"},
       {"--to", "int4-g32", "--bits-down", "8", "--down-group", "16"}},
      {"qwen36", "colibri-qwen36", "qwen36", {"--bits", "experts=3"}, {"--bits-experts", "3"}},
      {"qwen3-moe", "colibri-qwen36", "qwen36", {"--to", "int4-g32"}, {"--to", "int4-g32"}},
      {"qwen3", "colibri-qwen3", "qwen3", {}, {}},
      {"qwen3", "colibri-qwen3", "qwen3", {"--to", "f16"}, {"--to", "f16"}},
      {"olmoe", "colibri-olmoe", "olmoe", {}, {}},
      {"llama", "colibri-llama", "llama", {}, {}},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string src = write_fixture(d, c.fixture);
    const std::string out = (d / ("out-" + std::to_string(n++))).string();
    std::vector<std::string> args{"convert", src, "-o", out};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const auto r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << c.fixture << ": " << r.err << r.out;
    EXPECT_NE(r.out.find("PLAN: target " + c.target), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
    std::vector<std::string> check{c.checker, src, out};
    check.insert(check.end(), c.check.begin(), c.check.end());
    EXPECT_EQ(run_test_python("container_targets.py", check), 0) << c.fixture << " " << out;
    const auto m = read_json(fs::path(out) / "qrepack.json");
    EXPECT_EQ(m["target"]["name"], c.target);
    const auto again = run_cli({"check-load", out});
    EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  }
}

// The same run twice, at 1 and 2 threads and with tiny jobs: identical bytes.
TEST(Targets, OutputDoesNotDependOnThreadsOrJobSize) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen36");
  const std::string a = (d / "a").string(), b = (d / "b").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", a, "--threads", "1"}).exit_code, 0);
  ASSERT_EQ(run_cli({"convert", src, "-o", b, "--threads", "2", "--job-size", "1kB"}).exit_code, 0);
  for (const auto& e : fs::directory_iterator(a)) {
    if (e.path().filename() == "qrepack.json") continue;
    EXPECT_EQ(testing::read_bytes(e.path()), testing::read_bytes(fs::path(b) / e.path().filename()))
        << e.path();
  }
}

TEST(Targets, LlamaStagesTheShardsWithTheirSha256) {
  TempDir d;
  const std::string src = write_fixture(d, "llama");
  const std::string out = (d / "out").string();
  const auto r = run_cli({"convert", src, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto meta = read_json(fs::path(out) / "llama_meta.json");
  EXPECT_EQ(meta["source"], fs::canonical(src).string());
  for (const auto& [shard, sha] : meta["shards"].items()) {
    EXPECT_EQ(testing::read_bytes(fs::path(out) / shard),
              testing::read_bytes(fs::path(src) / shard));
    EXPECT_EQ(sha.get<std::string>().size(), 64u);
  }
  // A quantized Llama has no reader: refused, nothing written.
  const auto q = run_cli({"convert", src, "-o", (d / "q").string(), "--to", "int4-g64"});
  EXPECT_EQ(q.exit_code, 2);
  EXPECT_NE(q.err.find("rule target.scheme"), std::string::npos) << q.err;
  EXPECT_FALSE(fs::exists(d / "q"));
}

TEST(Targets, FamiliesWithoutAReaderAreRefusedUnlessGenericIsAsked) {
  TempDir d;
  for (const char* fam : {"deepseek-v3", "minimax", "mistral"}) {
    const std::string src = write_fixture(d, fam);
    const std::string out = (d / (std::string(fam) + "-out")).string();
    const auto r = run_cli({"convert", src, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << fam;
    EXPECT_NE(r.err.find("rule target.no_reader"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--target generic"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
    const auto g = run_cli({"convert", src, "-o", out, "--target", "generic"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_NE(g.err.find("no known engine runtime loads"), std::string::npos) << g.err;
    EXPECT_NE(g.out.find("PLAN: target generic"), std::string::npos) << g.out;
    EXPECT_EQ(read_json(fs::path(out) / "qrepack.json")["parameters"]["target"], "generic");
  }
}

TEST(Targets, ATargetOfAnotherFamilyIsAUsageError) {
  TempDir d;
  const std::string src = write_fixture(d, "olmoe");
  const auto r = run_cli({"convert", src, "-o", (d / "x").string(), "--target", "colibri-qwen3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("its engine runtime is c/olmoe.c"), std::string::npos) << r.err;
  const auto typo = run_cli({"convert", src, "-o", (d / "x").string(), "--target", "olmoe"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("did you mean colibri-olmoe"), std::string::npos) << typo.err;
  const auto flags = run_cli({"convert", src, "-o", (d / "x").string(), "--mtp"});
  EXPECT_EQ(flags.exit_code, 2);
  EXPECT_NE(flags.err.find("rule target.flags"), std::string::npos) << flags.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

// A copy of checkpoint `src` at `bad` with one more tensor `name` (`dtype`, `shape`, zero
// bytes) in a shard of its own: written through reshard's copy and an added shard (a directory
// without an index reads every shard).
void add_tensor(const std::string& src, const std::string& bad, const std::string& name,
                const std::string& dtype, std::vector<std::uint64_t> shape, std::uint64_t bytes) {
  ASSERT_EQ(run_cli({"reshard", src, "-o", bad}).exit_code, 0);
  nlohmann::json h;
  h[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {0, bytes}}};
  std::string header = h.dump();
  while (header.size() % 8 != 0) header += ' ';
  std::vector<std::uint8_t> file(8);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<std::uint8_t>(n >> (8 * i));
  file.insert(file.end(), header.begin(), header.end());
  file.resize(file.size() + bytes, 0);
  testing::write_bytes(fs::path(bad) / "zz-extra.safetensors", file);
  fs::remove(fs::path(bad) / "model.safetensors.index.json");
}

// A name outside the contract stops the run before any output, naming it.
TEST(Targets, AnUnknownTensorIsRefusedBeforeAnyOutput) {
  TempDir d;
  for (const char* kind : {"qwen36", "qwen3", "olmoe", "llama"}) {
    const std::string src = write_fixture(d, kind);
    const std::string bad = (d / (std::string(kind) + "-bad")).string();
    add_tensor(src, bad, "model.layers.0.mlp.stray_proj.weight", "F32", {2}, 8);
    const std::string out = (d / (std::string(kind) + "-out")).string();
    const auto r = run_cli({"convert", bad, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << kind << ": " << r.out;
    EXPECT_NE(r.err.find("model.layers.0.mlp.stray_proj.weight"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << kind;
  }
}

// An index spelled with a leading zero is not the same layer or expert: "experts.01" beside
// "experts.1", of the right shape, would otherwise take expert 1's place and one of the two
// would be dropped without a word.
TEST(Targets, AnIndexWithALeadingZeroIsAnUnknownName) {
  TempDir d;
  const std::string src = write_fixture(d, "olmoe");
  for (const char* name : {"model.layers.0.mlp.experts.01.gate_proj.weight",
                           "model.layers.00.mlp.experts.1.gate_proj.weight"}) {
    const std::string bad = (d / "bad").string(), out = (d / "out").string();
    fs::remove_all(bad);
    add_tensor(src, bad, name, "BF16", {32, 64}, 32 * 64 * 2);  // the fixture's gate shape
    const auto r = run_cli({"convert", bad, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.out;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("rule target.unknown_tensor"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << name;
  }
}

TEST(Targets, AConfigWithoutAKeyTheTargetNeedsIsOneLine) {
  TempDir d;
  const std::string src = write_fixture(d, "qwen3");
  auto cfg = read_json(fs::path(src) / "config.json");
  cfg.erase("rope_theta");
  testing::write_text(fs::path(src) / "config.json", cfg.dump(2));
  const auto r = run_cli({"convert", src, "-o", (d / "x").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule qwen3.rope_theta"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

// check-load fails (exit 1, the gate's code) on a container the runtime would refuse.
TEST(Targets, CheckLoadCatchesWhatTheLoaderRefuses) {
  TempDir d;
  const std::string src = write_fixture(d, "olmoe");
  const std::string out = (d / "out").string();
  ASSERT_EQ(run_cli({"convert", src, "-o", out}).exit_code, 0);
  auto cfg = read_json(fs::path(out) / "config.json");
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() * 2;  // experts now too small
  testing::write_text(fs::path(out) / "config.json", cfg.dump());
  const auto r = run_cli({"check-load", out});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("merged_weight"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// A hostile config.json cannot make a planner list millions of tensors it then checks one by
// one: each target bounds its dims by its runtime's own ranges or the weight cap.
TEST(Targets, AConfigAtTheCapsIsRefusedBeforeAnyListIsBuilt) {
  TempDir d;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"olmoe", "num_experts", "config.max_weights"},
      {"llama", "num_hidden_layers", "llama.config"},
      {"qwen3", "num_hidden_layers", "qwen3.config"},
      {"qwen3-moe", "num_hidden_layers", "qwen36.config"},
  };
  for (const auto& [kind, key, rule] : cases) {
    const std::string src = write_fixture(d, kind);
    const fs::path cfg = fs::path(src) / "config.json";
    const std::vector<std::uint8_t> saved = testing::read_bytes(cfg);
    auto j = read_json(cfg);
    j[key] = 1 << 24;
    testing::write_text(cfg, j.dump());
    const auto r = run_cli({"convert", src, "-o", (d / "x").string()});
    EXPECT_EQ(r.exit_code, 2) << kind << ": " << r.err;
    EXPECT_NE(r.err.find("rule " + rule), std::string::npos) << kind << ": " << r.err;
    EXPECT_FALSE(fs::exists(d / "x"));
    testing::write_bytes(cfg, saved);
  }
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// `qrepack targets` prints the table that drives convert's --target and --bits: every
// --target choice is listed, each default scheme is among its schemes, the defaults follow
// the families, and a --bits name a target does not list is refused naming what it takes.
TEST(TargetsCommand, ListsTheTableTheParserUses) {
  const auto r = run_cli({"targets", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto table = nlohmann::json::parse(r.out);
  const auto help = run_cli({"convert", "--help"});
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& t : table) {
    const std::string name = t["name"];
    by_name[name] = t;
    EXPECT_NE(help.out.find(name), std::string::npos) << name;
    const std::string schemes = t["schemes"], def = t["default_scheme"];
    const bool grouped =
        def.starts_with("int4-g") && schemes.find("int4-g<N>") != std::string::npos;
    EXPECT_TRUE(grouped || schemes.find(def) != std::string::npos) << name << ": " << schemes;
    EXPECT_TRUE(t["every_target_takes"].get<std::string>().find("--shard") != std::string::npos);
  }
  EXPECT_EQ(by_name.size(), 13u);
  // Gemma 4 is routed by its GGUF's general.architecture.
  EXPECT_EQ(by_name["colibri-gemma4"]["default_for"], nlohmann::json({"gemma4"}));
  // Qwen3.8's types go to the runtime's sidecar; the fork's overlay is asked for by name.
  EXPECT_EQ(by_name["colibri-qwen38-experts-int4g64"]["default_for"],
            nlohmann::json({"qwen4_exp", "qwen4_exp_text"}));
  EXPECT_EQ(by_name["colibri-qwen38-int4"]["default_for"], nlohmann::json::array());
  EXPECT_EQ(
      by_name["colibri-qwen36"]["default_for"],
      nlohmann::json({"qwen3_5_moe", "qwen3_5_moe_text", "qwen3_moe", "qwen3_5", "qwen3_5_text"}));
  // Inkling's types default to the main container, not to the dense overlay.
  EXPECT_EQ(by_name["colibri-inkling-dense"]["default_for"], nlohmann::json::array());
  EXPECT_EQ(by_name["colibri-kimi-k3"]["bits"], nlohmann::json({"mla", "head"}));
  EXPECT_EQ(by_name["colibri-olmoe"]["bits"], nlohmann::json::array());
  const auto text = run_cli({"targets"});
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("colibri-kimi-k3  loaded by c/kimi_k3.c"), std::string::npos) << text.out;

  TempDir d;
  const std::string src = write_fixture(d, "qwen36");
  auto bad = run_cli({"convert", src, "-o", (d / "x").string(), "--bits", "mla=4"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--target colibri-qwen36 takes --bits experts=2..8, down=2..8"),
            std::string::npos)
      << bad.err;
  EXPECT_NE(bad.err.find("rule target.scheme"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(d / "x"));
  // --down-group is in colibri-qwen36's row only.
  const std::string olmoe = write_fixture(d, "olmoe");
  bad = run_cli({"convert", olmoe, "-o", (d / "x").string(), "--down-group", "32"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--target colibri-olmoe takes no --down-group"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(d / "x"));
}

// The oracle's help names every runtime's reference file, from the schema table.
TEST(TargetsCommand, OracleHelpNamesEverySchema) {
  const auto top = run_cli({"--help"});
  const auto r = run_cli({"oracle", "--help"});
  for (const char* f :
       {"ref_glm.json", "ref_llama.json", "ref.json", "ref_qwen36.json", "ref_olmoe.json"}) {
    EXPECT_NE(top.out.find(f), std::string::npos) << f << "\n" << top.out;
    EXPECT_NE(r.out.find(f), std::string::npos) << f;
  }
  EXPECT_NE(r.out.find("ref_olmoe.json 12"), std::string::npos) << r.out;  // --new-tokens
}

}  // namespace
}  // namespace qrepack
