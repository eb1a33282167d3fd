// The engine's other containers and passes, end to end through the binary on the moe-fp8
// fixture (convert -> check-load -> verify): int2-row, int3-g64, fp8-passthrough, bits 2 under
// a grouped scheme and per-projection bits, each byte-identical to an independent numpy
// derivation of the engine converter's formulas (tests/python/engine_containers.py); the
// --mtp and --indexer passes added beside a main conversion without touching its shards.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "qrepack/io/checkpoint.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/verify/container_format.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::run_cli;
using testing::TempDir;

class Containers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_cli({"fixture", "moe-fp8", "-o", src()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string src() { return (dir_->path() / "src").string(); }
  static std::string out(const std::string& name) { return (dir_->path() / name).string(); }

  // convert (which runs check-load) then verify; returns verify's JSON.
  static nlohmann::json convert(const std::string& o, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"convert", src(), "-o", o};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto c = run_cli(args);
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    EXPECT_NE(c.out.find("check-load: 0 missing tensors, 0 unloadable"), std::string::npos)
        << c.out;
    const auto v = run_cli({"verify", src(), o, "--json"});
    EXPECT_EQ(v.exit_code, 0) << v.err;
    return v.exit_code == 0 ? nlohmann::json::parse(v.out) : nlohmann::json();
  }

  static TempDir* dir_;
};
TempDir* Containers::dir_ = nullptr;

std::map<std::string, std::string> formats(const nlohmann::json& verify) {
  std::map<std::string, std::string> f;
  for (const auto& t : verify["tensors"]) f[t["name"]] = t["format"];
  return f;
}

TEST_F(Containers, Int2RowMatchesTheDerivation) {
  const auto v = convert(out("int2"), {"--to", "int2-row"});
  auto f = formats(v);
  EXPECT_EQ(f["model.layers.3.mlp.experts.2.up_proj.weight"], "int2-row");
  EXPECT_EQ(f["lm_head.weight"], "int8-row");  // io stays int8
  EXPECT_EQ(testing::run_test_python("engine_containers.py", {src(), out("int2"), "int2-row"}), 0);
}

TEST_F(Containers, Int3G64MatchesTheDerivation) {
  const auto v = convert(out("int3"), {"--to", "int3-g64"});
  EXPECT_EQ(formats(v)["model.layers.1.self_attn.q_b_proj.weight"], "int3-g64");
  EXPECT_EQ(testing::run_test_python("engine_containers.py", {src(), out("int3"), "int3-g64"}), 0);
}

TEST_F(Containers, Fp8PassthroughCopiesCodesAndStampsResidents) {
  const auto v = convert(out("fp8"), {"--to", "fp8-passthrough"});
  for (const auto& t : v["tensors"]) {
    if (t["format"] == "fp8-e4m3-b128") {
      EXPECT_EQ(t["rel_l2"], 0.0) << t["name"];
    }
  }
  EXPECT_EQ(formats(v)["model.layers.3.mlp.experts.0.down_proj.weight"], "fp8-e4m3-b128");
  EXPECT_EQ(formats(v)["model.embed_tokens.weight"], "bf16");  // io as stored
  EXPECT_EQ(
      testing::run_test_python("engine_containers.py", {src(), out("fp8"), "fp8-passthrough"}), 0);
  const auto m = nlohmann::json::parse(read_bytes(fs::path(out("fp8")) / "qrepack.json"));
  std::size_t stamped = 0;
  for (const auto& o : m["outputs"]) stamped += o.contains("stamp");
  EXPECT_EQ(stamped, 40u);  // 5 layers x 5 attention + 3 dense x 3 + 2 MoE x 3 shared
}

TEST_F(Containers, TwoBitsUnderAGroupedSchemeAreQmaxOneNibbles) {
  const auto v = convert(out("g2"), {"--to", "int4-g64", "--bits",
                                     "experts=2,shared=2,attn=2,o_proj=2,kv_b=2,dense=2,io=2"});
  EXPECT_EQ(formats(v)["model.layers.0.self_attn.o_proj.weight"], "int4-g64");
  EXPECT_EQ(testing::run_test_python("engine_containers.py", {src(), out("g2"), "int4-g64-2bit"}),
            0);
}

TEST_F(Containers, PerProjectionAndPerClassBits) {
  const auto v = convert(out("mix"), {"--to", "int4-g64", "--bits",
                                      "gate=4,up=3,down=8,o_proj=8,kv_b=16,attn=2,io=16"});
  auto f = formats(v);
  EXPECT_EQ(f["model.layers.3.mlp.experts.1.gate_proj.weight"], "int4-g64");
  EXPECT_EQ(f["model.layers.3.mlp.experts.1.up_proj.weight"], "int3-g64");
  EXPECT_EQ(f["model.layers.3.mlp.experts.1.down_proj.weight"], "int8-row");
  // [128, 32] at 4 bits: one group of 64 covers the row, the bytes of int4-row.
  EXPECT_EQ(f["model.layers.3.mlp.shared_experts.down_proj.weight"], "int4-row");
  EXPECT_EQ(f["model.layers.3.mlp.shared_experts.up_proj.weight"], "int4-g64");
  EXPECT_EQ(f["model.layers.0.self_attn.o_proj.weight"], "int8-row");
  EXPECT_EQ(f["model.layers.0.self_attn.kv_b_proj.weight"], "bf16");
  EXPECT_EQ(f["model.layers.0.self_attn.q_a_proj.weight"], "int4-g64");  // 2 bits, grouped
  EXPECT_EQ(f["lm_head.weight"], "bf16");
  const auto m = nlohmann::json::parse(read_bytes(fs::path(out("mix")) / "qrepack.json"));
  EXPECT_EQ(m["parameters"]["bits"]["down"], 8);
  EXPECT_EQ(m["parameters"]["bits"]["experts"], 4);
}

// A routed expert at fp8's collision shape (its block scales as many as its rows) would be
// read as int8-row: the engine never consults a stamp for it, so it is refused; a resident at
// the same shape is stamped and reads back as fp8.
TEST(ContainersCollision, UnstampableFp8CollisionIsRefusedAStampedOneWritten) {
  TempDir d;
  const std::string s = (d.path() / "s").string();
  std::vector<TensorSpec> specs;
  const std::vector<std::string> names = {"model.layers.0.self_attn.o_proj.weight",
                                          "model.layers.0.mlp.experts.0.up_proj.weight"};
  for (const auto& n : names) {
    specs.push_back({n, Dtype::kF8E4M3, {1, 128}});
    specs.push_back({n + "_scale_inv", Dtype::kF32, {1, 1}});
  }
  auto plan = plan_shards(specs, kDefaultMaxShardBytes, {});
  ASSERT_TRUE(plan.ok());
  auto w = CheckpointWriter::create(s, std::move(plan).value());
  ASSERT_TRUE(w.ok());
  const float one = 1.0f;
  std::vector<std::uint8_t> scale(4);
  std::memcpy(scale.data(), &one, 4);
  for (const auto& n : names) {
    ASSERT_TRUE((*w)->write_tensor(n, std::vector<std::uint8_t>(128, 0x38)).ok());
    ASSERT_TRUE((*w)->write_tensor(n + "_scale_inv", scale).ok());
  }
  ASSERT_TRUE((*w)->finish().ok());
  const std::string o = (d.path() / "o").string();
  auto r = run_cli({"convert", s, "-o", o, "--to", "fp8-passthrough", "--no-coverage-gate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("experts.0.up_proj.weight': [1, 128] in fp8-e4m3-b128 would read back as "
                       "int8-row"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("rule container.collision"), std::string::npos);
  EXPECT_EQ(r.err.find("o_proj"), std::string::npos) << r.err;  // stamped: fine
  EXPECT_FALSE(fs::exists(o));
  r = run_cli({"convert", s, "-o", o, "--to", "fp8-passthrough", "--no-coverage-gate", "--drop",
               "experts"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto v = run_cli({"verify", s, o, "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(nlohmann::json::parse(v.out)["tensors"][0]["format"], "fp8-e4m3-b128");
}

// --mtp then --indexer beside a finished int4-g64 conversion: the main shards are untouched,
// the index names every tensor, check-load checks the MTP head and the indexer, a rerun with
// the same flags does nothing and one with other flags is refused.
TEST_F(Containers, MtpAndIndexerPassesAddBesideTheMainConversion) {
  const std::string o = out("passes");
  ASSERT_EQ(run_cli({"convert", src(), "-o", o, "--to", "int4-g64"}).exit_code, 0);
  const auto main_bytes = read_bytes(fs::path(o) / "model.safetensors");
  const auto main_manifest = read_bytes(fs::path(o) / "qrepack.json");
  auto r = run_cli({"convert", src(), "--mtp", "-o", o});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("pass mtp, --to int8-row; bits experts=8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check-load: 0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  r = run_cli({"convert", src(), "--indexer", "-o", o});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(read_bytes(fs::path(o) / "model.safetensors"), main_bytes);
  EXPECT_EQ(read_bytes(fs::path(o) / "qrepack.json"), main_manifest);
  EXPECT_TRUE(fs::exists(fs::path(o) / "out-mtp-00000.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(o) / "out-idx-00000.safetensors"));
  const auto cl = run_cli({"check-load", o});
  EXPECT_EQ(cl.exit_code, 0) << cl.out;
  // The index names the tensors of all three.
  const auto idx = nlohmann::json::parse(read_bytes(fs::path(o) / kIndexFileName));
  EXPECT_EQ(idx["weight_map"]["model.layers.5.eh_proj.weight"], "out-mtp-00000.safetensors");
  EXPECT_EQ(idx["weight_map"]["model.layers.1.self_attn.indexer.wk.weight"],
            "out-idx-00000.safetensors");
  EXPECT_EQ(idx["weight_map"]["lm_head.weight"], "model.safetensors");
  auto ck = Checkpoint::open(o);
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  // The MTP head is int8-row (default), the MTP layer's indexer in no pass.
  const auto v = run_cli({"verify", src(), o, "--json"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const auto f = formats(nlohmann::json::parse(v.out));
  EXPECT_EQ(f.at("model.layers.5.eh_proj.weight"), "int8-row");
  EXPECT_EQ(f.at("model.layers.5.mlp.experts.3.gate_proj.weight"), "int8-row");
  EXPECT_EQ(f.at("model.layers.2.self_attn.indexer.wq_b.weight"), "int8-row");
  EXPECT_EQ(f.count("model.layers.5.self_attn.indexer.wq_b.weight"), 0u);
  EXPECT_EQ(f.at("model.layers.3.mlp.experts.3.gate_proj.weight"), "int4-g64");
  // Again with the same flags: nothing to do. With others: refused, nothing changed.
  r = run_cli({"convert", src(), "--mtp", "-o", o});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("mtp: " + o + " is already complete"), std::string::npos) << r.out;
  const auto mtp_bytes = read_bytes(fs::path(o) / "out-mtp-00000.safetensors");
  r = run_cli({"convert", src(), "--mtp", "--to", "int4-row", "-o", o});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rule pass.finished"), std::string::npos) << r.err;
  EXPECT_EQ(read_bytes(fs::path(o) / "out-mtp-00000.safetensors"), mtp_bytes);
  EXPECT_EQ(read_bytes(fs::path(o) / "model.safetensors"), main_bytes);
}

TEST_F(Containers, PassIntoAnEmptyDirectoryAndRefusals) {
  const std::string o = out("mtp-only");
  auto r = run_cli({"convert", src(), "--mtp", "-o", o, "--to", "int4-row"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("per-row int4/int2 MTP head loses"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("check-load (the passes alone"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(o) / "config.json"));
  EXPECT_FALSE(fs::exists(fs::path(o) / kIndexFileName));  // one file: no index needed
  // A main run that kept the MTP layer as stored: the pass's tensors collide.
  const std::string k = out("kept");
  ASSERT_EQ(run_cli({"convert", src(), "-o", k, "--keep-mtp"}).exit_code, 0);
  r = run_cli({"convert", src(), "--mtp", "-o", k});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rule pass.collision"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(fs::path(k) / "out-mtp-00000.safetensors"));
  // A dead pass's shard (no manifest) is replaced.
  const std::string dead = out("dead");
  ASSERT_EQ(run_cli({"convert", src(), "-o", dead}).exit_code, 0);
  testing::write_text(fs::path(dead) / "out-mtp-00000.safetensors", "junk");
  r = run_cli({"convert", src(), "--mtp", "-o", dead});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_cli({"check-load", dead}).exit_code, 0);
}

// A stamp map the engine would refuse at discovery is refused by every reader: not a JSON
// object, a value that is not a string, two shards disagreeing about a tensor, too many.
TEST(ContainersStamps, HostileStampMapsAreRefused) {
  const auto write = [](const std::string& dir, const std::vector<std::string>& maps) {
    std::vector<TensorSpec> specs;
    for (std::size_t i = 0; i < maps.size(); ++i) {
      specs.push_back({"t" + std::to_string(i), Dtype::kU8, {4}});
    }
    auto plan = plan_shards(specs, 4, {});  // one tensor per shard
    ASSERT_TRUE(plan.ok());
    for (std::size_t i = 0; i < maps.size(); ++i) {
      ASSERT_TRUE(set_shard_metadata(*plan, i, {{"colibri.fmt", maps[i]}}).ok());
    }
    auto w = CheckpointWriter::create(dir, std::move(plan).value());
    ASSERT_TRUE(w.ok());
    for (const auto& t : specs) {
      ASSERT_TRUE((*w)->write_tensor(t.name, std::vector<std::uint8_t>(4)).ok());
    }
    ASSERT_TRUE((*w)->finish().ok());
  };
  const auto stamps_of = [](const std::string& dir) -> std::string {
    auto ck = Checkpoint::open(dir);
    if (!ck.ok()) return "open failed";
    auto st = read_format_stamps(*ck);
    return st.ok() ? std::to_string(st->size()) : std::string(st.error().message());
  };
  TempDir d;
  std::string many = "{";
  for (int i = 0; i <= 4096; ++i) many += (i ? "," : "") + fmt::format("\"w{}\":\"int8-row\"", i);
  many += "}";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{R"({"a":"fp8-e4m3-b128"})", R"({"a":"fp8-e4m3-b128","b":"int8-row"})"}, "2"},
      {{R"(["a"])"}, "is not a JSON object"},
      {{R"({"a":1})"}, "a value that is not a string"},
      {{R"({"a":"int8-row"})", R"({"a":"fp8-e4m3-b128"})"}, "where another shard says"},
      {{many}, "more than 4096"},
  };
  int n = 0;
  for (const auto& [maps, want] : cases) {
    const std::string dir = (d.path() / std::to_string(n++)).string();
    write(dir, maps);
    EXPECT_NE(stamps_of(dir).find(want), std::string::npos) << stamps_of(dir);
  }
}

}  // namespace
}  // namespace qrepack
