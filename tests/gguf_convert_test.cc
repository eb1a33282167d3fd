// GGUF sources end to end: the ggml decoders bit-exact with an independent numpy decoder
// (tests/python/gguf_ref.py) on the fixture and on random blocks; the olmoe-gguf fixture
// converted into colibri-olmoe through the CLI, every output byte equal to gguf_ref.py's
// derivation and check-load passing; bad input refused with one line naming file, tensor and
// rule, before any output, the source left in place.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
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

// `blocks` random blocks of type `t`, its fp16 / bf16 scales kept finite (subnormals
// included); with `bounded`, MXFP4 exponents stay at most 2^72 so every value is finite.
std::vector<std::uint8_t> random_blocks(const GgmlTypeInfo& t, std::uint64_t blocks,
                                        SplitMix64& rng, bool bounded = false) {
  std::vector<std::uint8_t> b(blocks * t.block_bytes);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng.next() >> 56);
  // Clear the top exponent bit of every 16-bit word that is an fp16 or bf16 value: finite.
  const auto finite16 = [&](std::size_t at) { b[at + 1] &= 0xBF; };
  for (std::uint64_t k = 0; k < blocks; ++k) {
    const std::size_t base = k * t.block_bytes;
    switch (t.id) {
      case kGgmlF16:
      case kGgmlBF16:
      case kGgmlQ4_0:
      case kGgmlQ8_0:
      case kGgmlQ5_0:
      case kGgmlIQ4_NL:
      case kGgmlIQ4_XS:
      case kGgmlIQ3_XXS:
        finite16(base);
        break;
      case kGgmlF32:
        b[base + 3] &= 0xBF;
        break;
      case kGgmlQ4_1:
      case kGgmlQ5_1:
      case kGgmlQ4_K:
      case kGgmlQ5_K:
        finite16(base), finite16(base + 2);  // d and m / dmin
        break;
      case kGgmlQ2_K:
        finite16(base + 80), finite16(base + 82);
        break;
      case kGgmlQ3_K:
        finite16(base + 108);
        break;
      case kGgmlQ6_K:
        finite16(base + 208);
        break;
      case kGgmlTQ1_0:
        finite16(base + 52);
        break;
      case kGgmlTQ2_0:
        finite16(base + 64);
        break;
      case kGgmlMXFP4:
        if (bounded) b[base] = static_cast<std::uint8_t>(b[base] % 200);
        break;
      default:
        break;
    }
  }
  return b;
}

// Random block bytes of every decoded type (MXFP4 exponents up to 255: 2^127, not NaN).
TEST(GgufDequant, RandomBlocksMatchTheIndependentDecoder) {
  SplitMix64 rng(20261206);
  std::vector<fixtures::GgufOutTensor> tensors;
  for (const GgmlTypeInfo& t : ggml_types()) {
    if (!t.decodes) continue;
    const std::uint64_t blocks = 64;
    tensors.push_back(
        {std::string(t.name), {blocks * t.block}, t.id, random_blocks(t, blocks, rng)});
  }
  ASSERT_EQ(tensors.size(), 19u);  // F32, F16, BF16 and sixteen block types
  TempDir d;
  const fs::path g = d / "random.gguf";
  write_bytes(g, fixtures::gguf_bytes({}, tensors));
  dump_decodes(g.string(), d / "dump");
  EXPECT_EQ(run_test_python("gguf_ref.py", {"dequant", g.string(), (d / "dump").string()}), 0);
}

// The tiny fixture with some tensors in other types (random valid blocks); the rest as stored.
std::vector<std::uint8_t> retyped_fixture(const TempDir& d,
                                          const std::map<std::string, std::uint32_t>& types) {
  const fs::path src = d / "tiny.gguf";
  write_bytes(src, olmoe_gguf_fixture_bytes(5));
  auto f = GgufFile::open(src.string());
  EXPECT_TRUE(f.ok());
  std::vector<GgufKv> meta;
  for (const GgufKv& kv : f->header().metadata) {
    if (kv.key != "general.alignment") meta.push_back(kv);
  }
  SplitMix64 rng(7);
  std::vector<fixtures::GgufOutTensor> tensors;
  for (const GgufTensor& t : f->header().tensors) {
    const auto it = types.find(t.name);
    if (it == types.end()) {
      std::vector<std::uint8_t> raw(t.bytes);
      EXPECT_TRUE(f->read(t, 0, raw).ok());
      tensors.push_back({t.name, t.dims, t.ggml_type, std::move(raw)});
      continue;
    }
    const GgmlTypeInfo& info = *ggml_type_info(it->second);
    tensors.push_back(
        {t.name, t.dims, info.id, random_blocks(info, t.numel / info.block, rng, true)});
  }
  return fixtures::gguf_bytes(meta, tensors, 64);
}

// The K-quants most published GGUFs use, the other 32-blocks, IQ3_XXS and MXFP4, as experts and
// attention weights: the container equals the independent derivation byte for byte.
TEST(GgufConvert, KQuantsAndTheOtherTypesConvertAsDerived) {
  TempDir d;
  const std::map<std::string, std::uint32_t> types = {
      {"blk.0.ffn_gate_exps.weight", kGgmlQ4_K},   {"blk.0.ffn_up_exps.weight", kGgmlQ5_K},
      {"blk.0.ffn_down_exps.weight", kGgmlIQ4_XS}, {"blk.1.ffn_gate_exps.weight", kGgmlMXFP4},
      {"blk.1.ffn_up_exps.weight", kGgmlIQ4_NL},   {"blk.1.ffn_down_exps.weight", kGgmlQ5_1},
      {"blk.0.attn_q.weight", kGgmlQ4_1},          {"blk.0.attn_k.weight", kGgmlQ5_0},
      {"blk.1.attn_q.weight", kGgmlIQ3_XXS},
  };
  fs::create_directories(d / "src");
  const fs::path g = d / "src" / "olmoe-k.gguf";
  write_bytes(g, retyped_fixture(d, types));
  const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(run_test_python("gguf_ref.py", {"container", g.string(), (d / "out").string()}), 0);
  EXPECT_EQ(run_cli({"check-load", (d / "out").string()}).exit_code, 0);
}

// The tiny fixture as a split GGUF in `dir`: olmoe-tiny-0000i-of-0000N.gguf, the tensors cut
// into `parts` runs, the metadata in the first part and split.no / split.count /
// split.tensors.count in every part (as llama.cpp's gguf-split writes them). `edit(i, kv,
// tensors)` may change part i before it is written.
using PartEdit =
    std::function<void(std::uint32_t, std::vector<GgufKv>&, std::vector<fixtures::GgufOutTensor>&)>;
void write_split(const fs::path& dir, std::uint32_t parts, const PartEdit& edit = {}) {
  const fs::path whole = dir / "whole.tmp";
  fs::create_directories(dir);
  write_bytes(whole, olmoe_gguf_fixture_bytes(5));
  auto f = GgufFile::open(whole.string());
  ASSERT_TRUE(f.ok());
  const auto& all = f->header().tensors;
  for (std::uint32_t i = 0; i < parts; ++i) {
    std::vector<GgufKv> kv;
    if (i == 0) {
      for (const GgufKv& x : f->header().metadata) {
        if (x.key != "general.alignment") kv.push_back(x);
      }
    }
    kv.push_back({"split.no", fixtures::gguf_u16(static_cast<std::uint16_t>(i))});
    kv.push_back({"split.count", fixtures::gguf_u16(static_cast<std::uint16_t>(parts))});
    kv.push_back(
        {"split.tensors.count", fixtures::gguf_i32(static_cast<std::int32_t>(all.size()))});
    std::vector<fixtures::GgufOutTensor> tensors;
    for (std::size_t k = all.size() * i / parts; k < all.size() * (i + 1) / parts; ++k) {
      std::vector<std::uint8_t> raw(all[k].bytes);
      ASSERT_TRUE(f->read(all[k], 0, raw).ok());
      tensors.push_back({all[k].name, all[k].dims, all[k].ggml_type, std::move(raw)});
    }
    if (edit) edit(i, kv, tensors);
    write_bytes(dir / fmt::format("olmoe-tiny-{:05d}-of-{:05d}.gguf", i + 1, parts),
                fixtures::gguf_bytes(kv, tensors, 64));
  }
  fs::remove(whole);
}

// A split GGUF is one checkpoint: the same container as the single file, from its directory
// or any part's name, resumable like any run; inspect lists every part's tensors.
TEST(GgufConvert, ASplitGgufConvertsAsTheSingleFile) {
  TempDir d;
  fs::create_directories(d / "single");
  write_bytes(d / "single" / "olmoe-tiny.gguf", olmoe_gguf_fixture_bytes(5));
  write_split(d / "split", 3);
  ASSERT_EQ(run_cli({"convert", (d / "single").string(), "-o", (d / "a").string()}).exit_code, 0);
  const auto r = run_cli({"convert", (d / "split").string(), "-o", (d / "b").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(split: 3 parts)"), std::string::npos) << r.out;
  const auto c = run_cli({"convert", (d / "split" / "olmoe-tiny-00002-of-00003.gguf").string(),
                          "-o", (d / "c").string()});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const char* name : {"model-00000.safetensors", "config.json", "tokenizer.json"}) {
    EXPECT_EQ(read_bytes(d / "b" / name), read_bytes(d / "a" / name)) << name;
    EXPECT_EQ(read_bytes(d / "c" / name), read_bytes(d / "a" / name)) << name;
  }
  const auto again =
      run_cli({"convert", (d / "split").string(), "-o", (d / "b").string(), "--resume"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  const auto i = run_cli({"inspect", (d / "split").string()});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  for (const char* s : {"split into 3 files", "blk.1.ffn_up_exps.weight", "output.weight",
                        "token_embd.weight", "GGUF v3, 27 tensors"}) {
    EXPECT_NE(i.out.find(s), std::string::npos) << s << "\n" << i.out;
  }
}

TEST(GgufConvert, ABrokenSplitSetIsRefusedNamingThePart) {
  struct Case {
    std::string what, rule, mention;
    std::function<void(const fs::path&)> make;
  };
  const std::vector<Case> cases = {
      {"a missing part", "gguf.split", "part 2 of 3 is missing",
       [](const fs::path& dir) {
         write_split(dir, 3);
         fs::remove(dir / "olmoe-tiny-00002-of-00003.gguf");
       }},
      {"split.no against the name", "gguf.split", "disagree with the file name (part 3 of 3)",
       [](const fs::path& dir) {
         write_split(dir, 3, [](std::uint32_t i, std::vector<GgufKv>& kv, auto&) {
           if (i == 2) kv[kv.size() - 3].value = fixtures::gguf_u16(1);
         });
       }},
      {"a tensor in two parts", "gguf.split", "is also in an earlier part",
       [](const fs::path& dir) {
         write_split(dir, 2, [](std::uint32_t i, auto&, std::vector<fixtures::GgufOutTensor>& t) {
           if (i == 1) t[0].name = "token_embd.weight";
         });
       }},
      {"the tensor count", "gguf.split", "split.tensors.count is 28, the parts hold 27",
       [](const fs::path& dir) {
         write_split(dir, 2, [](std::uint32_t i, std::vector<GgufKv>& kv, auto&) {
           if (i == 0) kv.back().value = fixtures::gguf_i32(28);
         });
       }},
      {"a stray .gguf beside the set", "gguf.one_file", "holds 3 .gguf files",
       [](const fs::path& dir) {
         write_split(dir, 2);
         write_bytes(dir / "other.gguf", olmoe_gguf_fixture_bytes(1));
       }},
  };
  for (const Case& k : cases) {
    TempDir d;
    k.make(d / "src");
    const auto before = testing::list_dir(d / "src");
    const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
    EXPECT_EQ(r.exit_code, 2) << k.what << r.out;
    EXPECT_NE(r.err.find(k.rule), std::string::npos) << k.what << ": " << r.err;
    EXPECT_NE(r.err.find(k.mention), std::string::npos) << k.what << ": " << r.err;
    EXPECT_FALSE(fs::exists(d / "out")) << k.what;
    EXPECT_EQ(testing::list_dir(d / "src"), before) << k.what;
  }
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

// The fixture with tensor `name` (of `n_dims` dims) given ggml type `type` in its header only.
std::vector<std::uint8_t> with_header_type(const std::string& name, std::uint32_t n_dims,
                                           std::uint32_t type) {
  std::vector<std::uint8_t> b = olmoe_gguf_fixture_bytes(0);
  const std::string s(b.begin(), b.end());
  const std::size_t at = s.find(name);
  EXPECT_NE(at, std::string::npos);
  const std::size_t type_at = at + name.size() + 4 + 8 * n_dims;
  for (int i = 0; i < 4; ++i) b[type_at + i] = static_cast<std::uint8_t>(type >> (8 * i));
  return b;
}

// A type ggml added after qrepack's table (40 and up) is listed by inspect, not a broken file;
// a conversion needing it is refused naming the tensor and the type.
TEST(GgufConvert, ATypeNewerThanTheTableIsListedAndRefusedByName) {
  TempDir d;
  fs::create_directories(d / "src");
  write_bytes(d / "src" / "olmoe-tiny.gguf", with_header_type("blk.1.ffn_down_exps.weight", 3, 41));
  const auto i = run_cli({"inspect", (d / "src").string()});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("type 41 (newer than qrepack)"), std::string::npos) << i.out;
  const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("blk.1.ffn_down_exps.weight (ggml type 41 is newer than qrepack's table"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d / "out"));
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
  // A type without a decoder (IQ2_XXS) is refused naming the tensor and the type.
  {
    TempDir d;
    fs::create_directories(d / "src");
    write_bytes(d / "src" / "olmoe-tiny.gguf",
                retyped_fixture(d, {{"blk.1.ffn_down_exps.weight", 16}}));
    const auto r = run_cli({"convert", (d / "src").string(), "-o", (d / "out").string()});
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.err.find("blk.1.ffn_down_exps.weight (ggml type IQ2_XXS has no decoder)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("missing blk.1.ffn_down_exps.weight"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("1 tensor(s)"), std::string::npos) << r.err;  // that one, named once
    EXPECT_FALSE(fs::exists(d / "out"));
  }
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
