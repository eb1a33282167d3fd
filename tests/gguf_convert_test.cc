// GGUF sources end to end: the ggml decoders bit-exact with an independent numpy decoder
// (tests/python/gguf_ref.py) on the fixture and on random blocks; the olmoe-gguf fixture
// converted into colibri-olmoe through the CLI, every output byte equal to gguf_ref.py's
// derivation and check-load passing; bad input refused with one line naming file, tensor and
// rule, before any output, the source left in place.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures/gguf_writer.h"
#include "fixtures/olmoe_gguf_fixture.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/gguf.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;
using testing::write_bytes;

// Writes every tensor's decode to dump/<name>.f32.
void dump_decodes(const std::string& gguf, const fs::path& dump) {
  auto f = GgufFile::open(gguf);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  fs::create_directories(dump);
  for (const GgufTensor& t : f->header().tensors) {
    std::vector<std::uint8_t> raw(t.bytes);
    ASSERT_TRUE(f->read(t, 0, raw).ok());
    std::vector<float> out(t.numel);
    ASSERT_TRUE(ggml_dequantize_row(t.ggml_type, raw, out)) << t.name;
    std::vector<std::uint8_t> bytes(out.size() * 4);
    std::memcpy(bytes.data(), out.data(), bytes.size());
    write_bytes(dump / (t.name + ".f32"), bytes);
  }
}

TEST(GgufDequant, FixtureMatchesTheIndependentDecoder) {
  TempDir d;
  const fs::path g = d / "f.gguf";
  write_bytes(g, olmoe_gguf_fixture_bytes(3));
  dump_decodes(g.string(), d / "dump");
  EXPECT_EQ(run_test_python("gguf_ref.py", {"dequant", g.string(), (d / "dump").string()}), 0);
}

// Random block bytes of every decoded type, fp16 scales kept finite (subnormals included).
TEST(GgufDequant, RandomBlocksMatchTheIndependentDecoder) {
  SplitMix64 rng(20261206);
  std::vector<fixtures::GgufOutTensor> tensors;
  for (const GgmlTypeInfo& t : ggml_types()) {
    if (!t.decodes) continue;
    const std::uint64_t blocks = 64;
    std::vector<std::uint8_t> b(blocks * t.block_bytes);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng.next() >> 56);
    // Clear the top exponent bit of every 16-bit word that is an fp16 or bf16 value: finite.
    const auto finite16 = [&](std::size_t at) { b[at + 1] &= 0xBF; };
    for (std::uint64_t k = 0; k < blocks; ++k) {
      const std::size_t base = k * t.block_bytes;
      if (t.id == kGgmlF16 || t.id == kGgmlBF16) finite16(base);
      if (t.id == kGgmlF32) b[base + 3] &= 0xBF;
      if (t.id == kGgmlQ4_0 || t.id == kGgmlQ8_0) finite16(base);
      if (t.id == kGgmlQ2_K) finite16(base + 80), finite16(base + 82);
      if (t.id == kGgmlQ3_K) finite16(base + 108);
      if (t.id == kGgmlQ6_K) finite16(base + 208);
    }
    tensors.push_back({std::string(t.name), {blocks * t.block}, t.id, std::move(b)});
  }
  TempDir d;
  const fs::path g = d / "random.gguf";
  write_bytes(g, fixtures::gguf_bytes({}, tensors));
  dump_decodes(g.string(), d / "dump");
  EXPECT_EQ(run_test_python("gguf_ref.py", {"dequant", g.string(), (d / "dump").string()}), 0);
}

struct Converted {
  std::string src, gguf, out;
};

Converted convert_fixture(const TempDir& d, const std::vector<std::string>& flags = {}) {
  Converted c{(d / "src").string(), (d / "src" / "olmoe-tiny.gguf").string(), (d / "out").string()};
  EXPECT_EQ(run_cli({"fixture", "olmoe-gguf", "-o", c.src}).exit_code, 0);
  std::vector<std::string> args = {"convert", c.src, "-o", c.out};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("PLAN: target colibri-olmoe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable"), std::string::npos) << r.out;
  return c;
}

TEST(GgufConvert, ContainerMatchesTheIndependentDerivation) {
  TempDir d;
  const Converted c = convert_fixture(d);
  const auto before = read_bytes(c.gguf);
  EXPECT_EQ(run_test_python("gguf_ref.py", {"container", c.gguf, c.out}), 0);
  EXPECT_EQ(run_cli({"check-load", c.out}).exit_code, 0);
  EXPECT_EQ(read_bytes(c.gguf), before);  // the source is never touched
  // The file itself, not its directory, converts the same.
  const auto r = run_cli({"convert", c.gguf, "-o", (d / "again").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_bytes(d / "again" / "model-00000.safetensors"),
            read_bytes(fs::path(c.out) / "model-00000.safetensors"));
}

TEST(GgufConvert, QkPermutedAndNormTopkProb) {
  TempDir d;
  const Converted c = convert_fixture(d, {"--qk-permuted", "--norm-topk-prob"});
  EXPECT_EQ(run_test_python("gguf_ref.py",
                            {"container", c.gguf, c.out, "--qk-permuted", "--norm-topk-prob"}),
            0);
}

TEST(GgufConvert, InspectListsTensorsAndMetadata) {
  TempDir d;
  ASSERT_EQ(run_cli({"fixture", "olmoe-gguf", "-o", (d / "src").string()}).exit_code, 0);
  const auto r = run_cli({"inspect", (d / "src" / "olmoe-tiny.gguf").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"blk.0.ffn_gate_exps.weight", "Q2_K", "Q3_K", "Q6_K", "Q4_0", "Q8_0",
                        "BF16", "[256, 256, 4]", "general.architecture", "olmoe.expert_count",
                        "GGUF v3, 27 tensors", "colibri-olmoe"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
}

// Patches the fixture's bytes: the first occurrence of `from` becomes `to` (same length).
std::vector<std::uint8_t> patched(std::string_view from, std::string_view to) {
  std::vector<std::uint8_t> b = olmoe_gguf_fixture_bytes(0);
  const std::string s(b.begin(), b.end());
  const std::size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  std::copy(to.begin(), to.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
  return b;
}

TEST(GgufConvert, BadInputIsRefusedBeforeAnyOutput) {
  struct Case {
    std::vector<std::uint8_t> bytes;
    std::string rule, mention;
  };
  const std::vector<Case> cases = {
      {patched("olmoe\x0c", "llama\x0c"), "olmoe_gguf.architecture", "llama"},
      {patched("blk.0.attn_v.", "blk.0.attn_x."), "target.unknown_tensor", "blk.0.attn_x"},
      {patched("output_norm.weight", "output_norX.weight"), "target.unknown_tensor",
       "missing output_norm.weight"},
      {patched("GGUF\x03", "GGUF\x07"), "gguf.version", "olmoe-tiny.gguf"},
  };
  for (const Case& k : cases) {
    TempDir d;
    fs::create_directories(d / "src");
    write_bytes(d / "src" / "olmoe-tiny.gguf", k.bytes);
    const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
    EXPECT_EQ(r.exit_code, 2) << k.rule << r.out;
    EXPECT_NE(r.err.find(k.rule), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(k.mention), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("olmoe-tiny.gguf"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d / "out")) << k.rule;
    EXPECT_TRUE(fs::exists(d / "src" / "olmoe-tiny.gguf"));
  }
  TempDir d;  // two .gguf files in the directory
  fs::create_directories(d / "src");
  write_bytes(d / "src" / "a.gguf", olmoe_gguf_fixture_bytes(0));
  write_bytes(d / "src" / "b.gguf", olmoe_gguf_fixture_bytes(1));
  const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gguf.one_file"), std::string::npos) << r.err;
  const auto flags = run_cli({"convert", (d / "src" / "a.gguf").string(), "-o",
                              (d / "out").string(), "--to", "int4-g128"});
  EXPECT_EQ(flags.exit_code, 2);
  EXPECT_NE(flags.err.find("target.flags"), std::string::npos) << flags.err;
  EXPECT_FALSE(fs::exists(d / "out"));
}

}  // namespace
}  // namespace qrepack
