// colibri-gemma4 end to end through the CLI: the gemma4 fixture packed into manifest.json +
// layer-NN.g4ex, every byte equal to an independent numpy derivation
// (tests/python/gemma4_pack.py), check-load passing; bad GGUFs refused before any output with
// one line naming file, tensor and rule; check-load catching a changed record, header field,
// padding byte or manifest value. --resume, --shard + merge and kills: target_runs_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fixtures/gemma4_fixture.h"
#include "qrepack/formats/ggml_quants.h"
#include "targets/gemma4/gemma4_pack.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
namespace dims = gemma4_fixture_dims;
using testing::read_bytes;
using testing::run_cli;
using testing::run_test_python;
using testing::TempDir;
using testing::write_bytes;

// The fixture converted into d/out (its GGUF at d/src/gemma4-tiny.gguf).
struct Packed {
  std::string src, gguf, out;
};

Packed pack_fixture(const TempDir& d) {
  Packed p{(d / "src").string(), (d / "src" / "gemma4-tiny.gguf").string(), (d / "out").string()};
  EXPECT_EQ(run_cli({"fixture", "gemma4", "-o", p.src}).exit_code, 0);
  const auto r = run_cli({"convert", p.src, "-o", p.out});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("PLAN: target colibri-gemma4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 missing tensors, 0 unloadable (12 checked)"), std::string::npos) << r.out;
  return p;
}

TEST(Gemma4Pack, MatchesTheIndependentDerivation) {
  TempDir d;
  const Packed p = pack_fixture(d);
  const auto before = read_bytes(p.gguf);
  EXPECT_EQ(run_test_python("gemma4_pack.py", {"check", p.gguf, p.out}), 0);
  const auto c = run_cli({"check-load", p.out});
  EXPECT_EQ(c.exit_code, 0) << c.err << c.out;
  EXPECT_EQ(read_bytes(p.gguf), before);  // the source is never touched
  // The file itself, --target named, converts the same; --dry-run writes nothing.
  const auto again = run_cli({"convert", p.gguf, "-o", (d / "again").string(), "--target",
                              "colibri-gemma4", "--threads", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  for (const char* f : {"manifest.json", "layer-00.g4ex", "layer-02.g4ex"}) {
    EXPECT_EQ(read_bytes(d / "again" / f), read_bytes(fs::path(p.out) / f)) << f;
  }
  const auto dry = run_cli({"convert", p.src, "-o", (d / "dry").string(), "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("writes manifest.json and 3 file(s)"), std::string::npos) << dry.out;
  EXPECT_FALSE(fs::exists(d / "dry"));
  const auto i = run_cli({"inspect", p.gguf});
  EXPECT_NE(i.out.find("target: colibri-gemma4"), std::string::npos) << i.out;
}

TEST(Gemma4Pack, FileNamesAndHeader) {
  EXPECT_EQ(gemma4_file_name(0), "layer-00.g4ex");
  EXPECT_EQ(gemma4_file_name(29), "layer-29.g4ex");
  EXPECT_EQ(gemma4_file_name(100), "layer-100.g4ex");
  // Gemma-4-26B-A4B: W 2816, F 704, E 128 (NOTES' worked numbers).
  Gemma4Layer l;
  l.gate_bytes = 704 * (2816 / 32) * 18;
  l.down_bytes = 2816 * (704 / 32) * 18;
  l.payload = 3345408;
  l.stride = 3346432;
  EXPECT_EQ(l.gate_bytes, 1115136u);
  EXPECT_EQ(2 * l.gate_bytes + l.down_bytes, l.payload);
  const auto h = gemma4_header(7, {30, 2816, 704, 128, 8}, l);
  ASSERT_EQ(h.size(), 4096u);
  const std::vector<std::uint8_t> head(h.begin(), h.begin() + 28);
  EXPECT_EQ(std::string(head.begin(), head.begin() + 8), "G4EXPK01");
  EXPECT_EQ(head[8], 1);
  EXPECT_EQ(head[12], 7);
  EXPECT_EQ(head[16], 128);
  EXPECT_EQ(head[20], 2);
  EXPECT_EQ(head[24] | head[25] << 8, 4096);
  EXPECT_EQ(h[48] | h[49] << 8 | h[50] << 16, 3346432);
}

// The fixture's parts with `edit` applied, written to d/src/NAME.
using PartsEdit = std::function<void(Gemma4FixtureParts&)>;
void write_edited(const fs::path& dir, const PartsEdit& edit, std::uint32_t type = kGgmlQ4_0) {
  Gemma4FixtureParts p = gemma4_fixture_parts(3, type);
  if (edit) edit(p);
  fs::create_directories(dir);
  write_bytes(dir / "gemma4-tiny.gguf",
              fixtures::gguf_bytes(p.metadata, p.tensors, dims::kAlignment));
}

fixtures::GgufOutTensor& find(Gemma4FixtureParts& p, const std::string& name) {
  for (auto& t : p.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << name;
  return p.tensors.front();
}

void erase(Gemma4FixtureParts& p, const std::string& name) {
  std::erase_if(p.tensors, [&](const auto& t) { return t.name == name; });
}

void set_meta(Gemma4FixtureParts& p, const std::string& key, std::optional<GgufValue> v) {
  std::erase_if(p.metadata, [&](const GgufKv& kv) { return kv.key == key; });
  if (v) p.metadata.push_back({key, *v});
}

TEST(Gemma4Pack, BadInputIsRefusedBeforeAnyOutput) {
  struct Case {
    std::string what, rule, mention;
    std::function<void(const fs::path&)> make;
    std::vector<std::string> flags = {};
  };
  const std::vector<Case> cases = {
      {"Q8_0 experts", "gemma4.expert_type", "blk.0.ffn_gate_up_exps.weight is Q8_0",
       [](const fs::path& dir) { write_edited(dir, {}, kGgmlQ8_0); }},
      {"a missing scale", "gemma4.missing_tensor", "no blk.1.ffn_down_exps.scale",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) { erase(p, "blk.1.ffn_down_exps.scale"); });
       }},
      {"an F16 scale", "gemma4.scale_type", "blk.2.ffn_down_exps.scale is F16",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) {
           auto& t = find(p, "blk.2.ffn_down_exps.scale");
           t.ggml_type = kGgmlF16;
           t.bytes.resize(t.bytes.size() / 2);
         });
       }},
      {"a misshapen down", "gemma4.shape", "has dims (64, 128, 8)",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) {
           find(p, "blk.2.ffn_down_exps.weight").dims = {64, 128, 8};  // same bytes
         });
       }},
      {"separate gate / up", "gemma4.missing_tensor", "separate ffn_gate_exps / ffn_up_exps",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) {
           auto& t = find(p, "blk.0.ffn_gate_up_exps.weight");
           t.name = "blk.0.ffn_gate_exps.weight";
           t.dims = {dims::kWidth, dims::kExpertWidth, 2 * dims::kExperts};
         });
       }},
      {"a missing key", "gemma4.metadata", "no gemma4.expert_feed_forward_length",
       [](const fs::path& dir) {
         write_edited(
             dir, [](auto& p) { set_meta(p, "gemma4.expert_feed_forward_length", std::nullopt); });
       }},
      {"F not a multiple of 32", "gemma4.metadata", "must be multiples of 32",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) {
           set_meta(p, "gemma4.expert_feed_forward_length", fixtures::gguf_u32(48));
         });
       }},
      {"another architecture",
       "gemma4.architecture",
       "is \"llama\", not \"gemma4\"",
       [](const fs::path& dir) {
         write_edited(dir, [](auto& p) {
           set_meta(p, "general.architecture", fixtures::gguf_string("llama"));
         });
       },
       {"--target", "colibri-gemma4"}},
      {"a split GGUF", "gemma4.split_gguf", "a split GGUF (2 parts) cannot be packed",
       [](const fs::path& dir) {
         Gemma4FixtureParts p = gemma4_fixture_parts(3, kGgmlQ4_0);
         fs::create_directories(dir);
         const std::size_t half = p.tensors.size() / 2;
         for (std::uint32_t i = 0; i < 2; ++i) {
           std::vector<GgufKv> kv = i == 0 ? p.metadata : std::vector<GgufKv>{};
           kv.push_back({"split.no", fixtures::gguf_u16(static_cast<std::uint16_t>(i))});
           kv.push_back({"split.count", fixtures::gguf_u16(2)});
           kv.push_back({"split.tensors.count",
                         fixtures::gguf_i32(static_cast<std::int32_t>(p.tensors.size()))});
           std::vector<fixtures::GgufOutTensor> part(
               p.tensors.begin() + static_cast<std::ptrdiff_t>(i == 0 ? 0 : half),
               i == 0 ? p.tensors.begin() + static_cast<std::ptrdiff_t>(half) : p.tensors.end());
           write_bytes(dir / fmt::format("gemma4-tiny-{:05d}-of-00002.gguf", i + 1),
                       fixtures::gguf_bytes(kv, part, dims::kAlignment));
         }
       }},
  };
  for (const Case& k : cases) {
    TempDir d;
    k.make(d / "src");
    const auto before = testing::list_dir(d / "src");
    std::vector<std::string> args = {"convert", (d / "src").string(), "-o", (d / "out").string()};
    args.insert(args.end(), k.flags.begin(), k.flags.end());
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << k.what << r.out << r.err;
    EXPECT_NE(r.err.find("rule " + k.rule), std::string::npos) << k.what << ": " << r.err;
    EXPECT_NE(r.err.find(k.mention), std::string::npos) << k.what << ": " << r.err;
    EXPECT_NE(r.err.find("gemma4-tiny"), std::string::npos) << k.what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << k.what << ": " << r.err;
    EXPECT_FALSE(fs::exists(d / "out")) << k.what;
    EXPECT_EQ(testing::list_dir(d / "src"), before) << k.what;
  }
}

// A copy of the packed directory with `edit` applied; check-load must fail (exit 1) naming
// `mention`.
void expect_check_fails(const TempDir& d, const Packed& p, const std::string& what,
                        const std::function<void(const fs::path&)>& edit,
                        const std::string& mention) {
  const fs::path copy = d / ("bad-" + std::to_string(std::hash<std::string>{}(what)));
  fs::copy(p.out, copy);
  edit(copy);
  const auto r = run_cli({"check-load", copy.string()});
  EXPECT_EQ(r.exit_code, 1) << what << ": " << r.out << r.err;
  EXPECT_NE(r.out.find(mention), std::string::npos) << what << ": " << r.out;
}

void poke(const fs::path& file, std::uint64_t at, std::uint8_t value) {
  auto b = read_bytes(file);
  b.at(at) = value;
  write_bytes(file, b);
}

void edit_manifest(const fs::path& dir, const std::string& from, const std::string& to) {
  const fs::path m = dir / "manifest.json";
  const auto b = read_bytes(m);
  std::string s(b.begin(), b.end());
  const std::size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  testing::write_text(m, s);
}

TEST(Gemma4Pack, CheckLoadCatchesDamage) {
  TempDir d;
  const Packed p = pack_fixture(d);
  constexpr std::uint64_t kStride = 28672, kGate = 9216;
  const std::uint64_t up_of_expert2 = 4096 + 2 * kStride + kGate + 5;
  expect_check_fails(
      d, p, "a record byte",
      [&](const fs::path& c) {
        const auto b = read_bytes(c / "layer-01.g4ex");
        poke(c / "layer-01.g4ex", up_of_expert2, static_cast<std::uint8_t>(b[up_of_expert2] ^ 1));
      },
      fmt::format("layer-01.g4ex: expert 2's up differs from the GGUF at byte {}", up_of_expert2));
  expect_check_fails(
      d, p, "a header field", [](const fs::path& c) { poke(c / "layer-00.g4ex", 12, 5); },
      "packed layer header disagrees with manifest: layer is 5");
  expect_check_fails(
      d, p, "the magic", [](const fs::path& c) { poke(c / "layer-02.g4ex", 0, 'X'); },
      "packed layer header is missing or corrupt");
  expect_check_fails(
      d, p, "a padding byte",
      [](const fs::path& c) { poke(c / "layer-02.g4ex", 4096 + 3 * kStride + 27648 + 7, 1); },
      "layer-02.g4ex: expert 3's padding is not zero");
  expect_check_fails(
      d, p, "an unread header byte", [](const fs::path& c) { poke(c / "layer-00.g4ex", 100, 1); },
      "header byte 100 is 0x01");
  expect_check_fails(
      d, p, "a truncated file",
      [](const fs::path& c) { fs::resize_file(c / "layer-01.g4ex", 4096 + 3 * kStride + 100); },
      "packed expert record is truncated");
  expect_check_fails(
      d, p, "a missing layer file", [](const fs::path& c) { fs::remove(c / "layer-02.g4ex"); },
      "missing layer-02.g4ex");
  expect_check_fails(
      d, p, "a null scale",
      [](const fs::path& c) {
        const auto b = read_bytes(c / "manifest.json");
        std::string s(b.begin(), b.end());
        const std::size_t at = s.find("\"expert_scale\": {");
        s.replace(at, s.find('}', at) - at + 1, "\"expert_scale\": null");
        testing::write_text(c / "manifest.json", s);
      },
      "layer 0 has no expert_scale: the runtime would use 1.0 and silently drop");
  expect_check_fails(
      d, p, "an offset",
      [](const fs::path& c) {
        edit_manifest(c, "\"source_within_expert_offset\": 9216",
                      "\"source_within_expert_offset\": 9215");
      },
      "layer 0 up: offset");
  expect_check_fails(
      d, p, "a Q8_0 component",
      [](const fs::path& c) { edit_manifest(c, "\"ggml_type\": 2", "\"ggml_type\": 8"); },
      "Gemma packed experts must use Q4_0");
  expect_check_fails(
      d, p, "a fractional width",
      [](const fs::path& c) { edit_manifest(c, "\"model_width\": 256", "\"model_width\": 256.5"); },
      "manifest field model_width is not an exact non-negative integer");
  expect_check_fails(
      d, p, "a duplicate key",
      [](const fs::path& c) {
        edit_manifest(c, "\"format\":", "\"architecture\": \"gemma4\",\n  \"format\":");
      },
      "architecture");
  expect_check_fails(
      d, p, "a wrong expert count",
      [](const fs::path& c) {
        edit_manifest(c, "\"expert_used_count\": 2", "\"expert_used_count\": 3");
      },
      "expert_used_count / gemma4.expert_used_count disagree: 3 vs 2");
  // A packed directory copied without qrepack.json is still checked as Gemma 4 packs (its
  // manifest.json says so), not as a GLM-style container.
  const fs::path bare = d / "no-qrepack-json";
  fs::copy(p.out, bare);
  fs::remove(bare / "qrepack.json");
  const auto b = run_cli({"check-load", bare.string()});
  EXPECT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("0 missing tensors, 0 unloadable (12 checked)"), std::string::npos) << b.out;
  const auto record = read_bytes(bare / "layer-00.g4ex");
  poke(bare / "layer-00.g4ex", 4096, static_cast<std::uint8_t>(record.at(4096) ^ 1));
  const auto bb = run_cli({"check-load", bare.string()});
  EXPECT_EQ(bb.exit_code, 1) << bb.out << bb.err;
  // What the loader accepts is accepted: an integral float.
  const fs::path ok = d / "float-width";
  fs::copy(p.out, ok);
  edit_manifest(ok, "\"model_width\": 256", "\"model_width\": 256.0");
  const auto r = run_cli({"check-load", ok.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace qrepack
