// The GGUF reader against hostile files, one per rule (a bad-file corpus built here), and the
// ggml decoders on worked examples.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixtures/gguf_writer.h"
#include "fixtures/olmoe_gguf_fixture.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/gguf.h"

namespace qrepack {
namespace {

using Bytes = std::vector<std::uint8_t>;

void put(Bytes& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_str(Bytes& b, std::string_view s) {
  put(b, s.size(), 8);
  b.insert(b.end(), s.begin(), s.end());
}

// A header with no metadata and these tensor infos (dims, type, offset), padded to 32, then
// `data` bytes.
struct Info {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::uint64_t offset;
};
Bytes file_with(const std::vector<Info>& infos, std::uint64_t data, const Bytes& kvs = {},
                std::uint64_t nkv = 0) {
  Bytes b = {'G', 'G', 'U', 'F'};
  put(b, 3, 4);
  put(b, infos.size(), 8);
  put(b, nkv, 8);
  b.insert(b.end(), kvs.begin(), kvs.end());
  for (const Info& i : infos) {
    put_str(b, i.name);
    put(b, i.dims.size(), 4);
    for (auto d : i.dims) put(b, d, 8);
    put(b, i.type, 4);
    put(b, i.offset, 8);
  }
  b.resize((b.size() + 31) / 32 * 32 + data, 0);
  return b;
}

Result<GgufHeader> parse(Bytes b) {
  MemorySource src("hostile.gguf", std::move(b));
  return parse_gguf(src);
}

std::string rule_of(const Bytes& b) {
  auto r = parse(b);
  if (r.ok()) return "ok";
  EXPECT_EQ(r.error().file(), "hostile.gguf");
  return r.error().rule();
}

TEST(GgufReader, ReadsTheFixture) {
  auto r = parse(olmoe_gguf_fixture_bytes(0));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->version, 3u);
  EXPECT_EQ(r->alignment, 64u);
  EXPECT_EQ(r->tensors.size(), 27u);
  const GgufValue* tokens = r->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array->items.size(), 96u);
  const GgufTensor* q = r->tensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->ggml_type, kGgmlQ2_K);
  EXPECT_EQ(q->bytes, 256u * 256 * 4 / 256 * 84);
  EXPECT_FLOAT_EQ(static_cast<float>(r->find("olmoe.attention.layer_norm_rms_epsilon")->f), 1e-5f);
}

TEST(GgufReader, EveryTruncationIsRefused) {
  const Bytes full = olmoe_gguf_fixture_bytes(0);
  for (std::size_t cut : {0ul, 3ul, 7ul, 20ul, 100ul, 2000ul, full.size() / 2, full.size() - 1}) {
    const Bytes b(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string rule = rule_of(b);
    EXPECT_TRUE(rule == "gguf.truncated" || rule == "gguf.tensor_span" ||
                rule == "gguf.tensor_count" || rule == "gguf.kv_count")
        << cut << ": " << rule;
  }
}

TEST(GgufReader, HostileHeadersNameTheirRule) {
  Bytes magic = file_with({}, 0);
  magic[0] = 'X';
  EXPECT_EQ(rule_of(magic), "gguf.magic");
  Bytes v1 = file_with({}, 0);
  v1[4] = 1;
  EXPECT_EQ(rule_of(v1), "gguf.version");
  Bytes many = file_with({}, 0);
  many[15] = 0x7f;  // tensor count ~2^62
  EXPECT_EQ(rule_of(many), "gguf.tensor_count");
  Bytes kvs = file_with({}, 0);
  kvs[23] = 0x7f;
  EXPECT_EQ(rule_of(kvs), "gguf.kv_count");
}

TEST(GgufReader, HostileMetadataNamesItsRule) {
  const auto one_kv = [](const Bytes& value) {
    Bytes kv;
    put_str(kv, "k");
    kv.insert(kv.end(), value.begin(), value.end());
    return file_with({}, 64, kv, 1);
  };
  Bytes long_key;
  put(long_key, std::uint64_t{1} << 40, 8);
  Bytes b = file_with({}, 64, long_key, 1);
  EXPECT_EQ(rule_of(b), "gguf.string_length");
  Bytes past_eof;
  put(past_eof, 8, 4);
  put(past_eof, 5000, 8);  // a 5000-byte string in a 100-byte file
  EXPECT_EQ(rule_of(one_kv(past_eof)), "gguf.truncated");
  Bytes bad_type;
  put(bad_type, 13, 4);
  EXPECT_EQ(rule_of(one_kv(bad_type)), "gguf.value_type");
  Bytes bad_bool;
  put(bad_bool, 7, 4);
  put(bad_bool, 2, 1);
  EXPECT_EQ(rule_of(one_kv(bad_bool)), "gguf.bool");
  Bytes bad_utf8;
  put(bad_utf8, 8, 4);
  put_str(bad_utf8, "\xed\xa0\x80");  // a surrogate
  EXPECT_EQ(rule_of(one_kv(bad_utf8)), "gguf.utf8");
  Bytes huge_array;
  put(huge_array, 9, 4);
  put(huge_array, 4, 4);
  put(huge_array, std::uint64_t{1} << 20, 8);
  EXPECT_EQ(rule_of(one_kv(huge_array)), "gguf.truncated");
  Bytes deep;  // arrays of one array, six deep
  put(deep, 9, 4);
  for (int i = 0; i < 6; ++i) {
    put(deep, 9, 4);
    put(deep, 1, 8);
  }
  deep.resize(deep.size() + 64, 0);
  EXPECT_EQ(rule_of(one_kv(deep)), "gguf.array_depth");
  Bytes align;
  put_str(align, "general.alignment");
  put(align, 4, 4);
  put(align, 48, 4);
  EXPECT_EQ(rule_of(file_with({}, 0, align, 1)), "gguf.alignment");
  Bytes dup;
  for (int i = 0; i < 2; ++i) {
    put_str(dup, "k");
    put(dup, 4, 4);
    put(dup, 1, 4);
  }
  EXPECT_EQ(rule_of(file_with({}, 0, dup, 2)), "gguf.duplicate_key");
}

TEST(GgufReader, HostileTensorInfosNameTheirRule) {
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 0, 0}}, 128)), "ok");
  EXPECT_EQ(rule_of(file_with({{"a", {1, 1, 1, 1, 1}, 0, 0}}, 64)), "gguf.n_dims");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 4, 0}}, 128)), "gguf.tensor_type");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 1024, 0}}, 128)), "gguf.tensor_type");
  EXPECT_EQ(rule_of(file_with({{"a", {100}, kGgmlQ4_0, 0}}, 128)), "gguf.block");
  EXPECT_EQ(rule_of(file_with({{"a", {0}, 0, 0}}, 128)), "gguf.shape");
  EXPECT_EQ(rule_of(file_with({{"a", {1ull << 40, 1ull << 40}, 0, 0}}, 128)), "gguf.shape");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 0, 16}}, 256)), "gguf.offset_alignment");
  EXPECT_EQ(rule_of(file_with({{"a", {64}, 0, 0}}, 128)), "gguf.tensor_span");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 0, ~0ull - 31}}, 128)), "gguf.tensor_span");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 0, 0}, {"b", {32}, 0, 96}}, 256)), "gguf.overlap");
  EXPECT_EQ(rule_of(file_with({{"a", {32}, 0, 0}, {"a", {32}, 0, 128}}, 512)),
            "gguf.duplicate_tensor");
  auto r = parse(file_with({{"blk.0.x", {32}, 0, 0}, {"blk.1.y", {32}, 0, 64}}, 256));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().tensor(), "blk.1.y");
  EXPECT_EQ(r.error().kind(), ErrorKind::kOffsetOverlap);
}

// `n` elements of `type` decoded from `in`.
std::vector<float> decode(std::uint32_t type, const Bytes& in, std::size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(ggml_dequantize_row(type, in, out));
  return out;
}

// One block each, decoded by hand from ggml-common.h's layouts (docs/formats/source-encodings.md
// "GGUF" has the same examples).
TEST(GgmlDequant, WorkedExamples) {
  Bytes q4(18, 0);
  q4[0] = 0x00, q4[1] = 0x38;  // d = 0.5
  q4[2] = 0x9F;                // x[0] = (15 - 8) * 0.5, x[16] = (9 - 8) * 0.5
  auto y = decode(kGgmlQ4_0, q4, 32);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], -4.0f);
  Bytes q8(34, 0);
  q8[0] = 0x00, q8[1] = 0x3C;  // d = 1
  q8[2] = 0x81;                // -127
  y = decode(kGgmlQ8_0, q8, 32);
  EXPECT_EQ(y[0], -127.0f);
  Bytes q2(84, 0);
  q2[0] = 0x21;                  // group 0: scale 1, min 2
  q2[16] = 0x03;                 // element 0: code 3
  q2[80] = 0x00, q2[81] = 0x3C;  // d = 1
  q2[82] = 0x00, q2[83] = 0x38;  // dmin = 0.5
  y = decode(kGgmlQ2_K, q2, 256);
  EXPECT_EQ(y[0], 3.0f - 1.0f);  // 1 * 3 - 0.5 * 2
  EXPECT_EQ(y[1], -1.0f);
  Bytes q3(110, 0);
  q3[0] = 0x01;  // hmask bit 0 of element 0 set: code 3 + 0
  q3[32] = 0x03;
  q3[96] = 0x01;  // scale 0: low 4 bits 1, high bits 0 -> 1 - 32 = -31
  q3[108] = 0x00, q3[109] = 0x3C;
  y = decode(kGgmlQ3_K, q3, 256);
  EXPECT_EQ(y[0], -93.0f);  // -31 * 3
  EXPECT_EQ(y[1], 124.0f);  // -31 * (0 - 4)
  Bytes q6(210, 0);
  q6[0] = 0x0F;                    // element 0: low 15
  q6[128] = 0x02;                  // high bits 2 -> 15 | 32 = 47 - 32 = 15
  q6[192] = 0xFE;                  // scale -2
  q6[208] = 0x00, q6[209] = 0x34;  // d = 0.25
  y = decode(kGgmlQ6_K, q6, 256);
  EXPECT_EQ(y[0], -7.5f);  // 0.25 * -2 * 15
  EXPECT_EQ(y[1], 16.0f);  // 0.25 * -2 * -32
}

// The types added for published GGUFs, one block each (docs/formats/source-encodings.md).
TEST(GgmlDequant, WorkedExamplesOfTheOtherTypes) {
  Bytes q41(20, 0);
  q41[1] = 0x38, q41[3] = 0xBC;  // d = 0.5, m = -1
  q41[4] = 0x3F;                 // x[0] = 15 * 0.5 - 1, x[16] = 3 * 0.5 - 1
  auto y = decode(kGgmlQ4_1, q41, 32);
  EXPECT_EQ(y[0], 6.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], -1.0f);
  Bytes q50(22, 0);
  q50[1] = 0x3C;                 // d = 1
  q50[2] = 0x01, q50[4] = 0x01;  // qh bit 0 (element 0) and bit 16 (element 16)
  q50[6] = 0x21;                 // element 0: 1 | 16 -> 17 - 16; element 16: 2 | 16 -> 18 - 16
  y = decode(kGgmlQ5_0, q50, 32);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[1], -16.0f);
  Bytes q51(24, 0);
  q51[1] = 0x38, q51[3] = 0x3C;  // d = 0.5, m = 1
  q51[7] = 0x80;                 // qh bit 31: element 31 gets 16
  y = decode(kGgmlQ5_1, q51, 32);
  EXPECT_EQ(y[31], 9.0f);  // 16 * 0.5 + 1
  EXPECT_EQ(y[0], 1.0f);
  Bytes q4k(144, 0);
  q4k[1] = 0x3C, q4k[3] = 0x38;  // d = 1, dmin = 0.5
  q4k[4] = 2, q4k[8] = 3;        // sub-block 0: scale 2, min 3
  q4k[5] = 1;                    // sub-block 1: scale 1, min 0
  q4k[12] = 0x21;                // sub-block 4: scale 1 | 0 << 4, min 2
  q4k[16] = 0x75;                // element 0: 5, element 32: 7
  q4k[80] = 0x04;                // element 128 (pair 2, low nibble): 4
  y = decode(kGgmlQ4_K, q4k, 256);
  EXPECT_EQ(y[0], 8.5f);    // 2 * 5 - 0.5 * 3
  EXPECT_EQ(y[32], 7.0f);   // 1 * 7 - 0
  EXPECT_EQ(y[128], 3.0f);  // 1 * 4 - 0.5 * 2
  EXPECT_EQ(y[1], -1.5f);   // 2 * 0 - 1.5
  Bytes q5k(176, 0);
  q5k[1] = 0x3C;           // d = 1, dmin = 0
  q5k[4] = 1, q5k[5] = 1;  // scales of sub-blocks 0 and 1
  q5k[16] = 0x03;          // qh[0]: bit 0 (element 0) and bit 1 (element 32)
  q5k[48] = 0x21;          // element 0: 1 + 16, element 32: 2 + 16
  y = decode(kGgmlQ5_K, q5k, 256);
  EXPECT_EQ(y[0], 17.0f);
  EXPECT_EQ(y[32], 18.0f);
  Bytes nl(18, 0);
  nl[1] = 0x38;  // d = 0.5
  nl[2] = 0xF0;  // element 0: level[0] = -127, element 16: level[15] = 113
  y = decode(kGgmlIQ4_NL, nl, 32);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[16], 56.5f);
  Bytes xs(136, 0);
  xs[1] = 0x3C;  // d = 1
  xs[2] = 0x02;  // scales_h: bits 0-1 = 2 -> sub-block 0's scale 0x21 = 33
  xs[4] = 0x01;  // scales_l low nibble 1
  xs[8] = 0x08;  // element 0: level[8] = 1
  y = decode(kGgmlIQ4_XS, xs, 256);
  EXPECT_EQ(y[0], 1.0f);      // (33 - 32) * 1
  EXPECT_EQ(y[32], 4064.0f);  // sub-block 1: scale 0 -> (0 - 32) * level[0] = -32 * -127
  Bytes mx(17, 0);
  mx[0] = 129;   // 2^(129 - 128) = 2
  mx[1] = 0xF7;  // element 0: code 7 (12) * 2, element 16: code 15 (-12) * 2
  y = decode(kGgmlMXFP4, mx, 32);
  EXPECT_EQ(y[0], 24.0f);  // 6 * 2^(129 - 127)
  EXPECT_EQ(y[16], -24.0f);
  EXPECT_EQ(y[1], 0.0f);
  mx[0] = 0;  // 2^-128, a subnormal
  y = decode(kGgmlMXFP4, mx, 32);
  EXPECT_EQ(y[0], std::ldexp(12.0f, -128));
  Bytes tq2(66, 0);
  tq2[65] = 0x38;  // d = 0.5
  tq2[0] = 0xE4;   // codes 0, 1, 2, 3 at shifts 0, 2, 4, 6: elements 0, 32, 64, 96
  tq2[32] = 0x02;  // the second half's byte 0, shift 0: element 128, code 2
  y = decode(kGgmlTQ2_0, tq2, 256);
  EXPECT_EQ(y[0], -0.5f);  // (0 - 1) * 0.5
  EXPECT_EQ(y[32], 0.0f);
  EXPECT_EQ(y[64], 0.5f);
  EXPECT_EQ(y[96], 1.0f);
  EXPECT_EQ(y[128], 0.5f);
  EXPECT_EQ(y[1], -0.5f);
  // TQ1_0: the digits 2 0 1 0 0 (most significant first) are 171 = 2 * 81 + 9, packed as
  // ceil(171 * 256 / 243) = 181; they are elements 0, 32, 64, 96, 128 of qs[0]'s run.
  Bytes tq1(54, 0);
  tq1[53] = 0x40;  // d = 2
  tq1[0] = 181;
  y = decode(kGgmlTQ1_0, tq1, 256);
  EXPECT_EQ(y[0], 2.0f);  // (2 - 1) * 2
  EXPECT_EQ(y[32], -2.0f);
  EXPECT_EQ(y[64], 0.0f);
  EXPECT_EQ(y[96], -2.0f);
  EXPECT_EQ(y[128], -2.0f);
  EXPECT_EQ(y[160], -2.0f);  // qs[32]: the 16-byte run, digit 0
  EXPECT_EQ(y[252], -2.0f);  // qh[0], digit 3
  // IQ3_XXS: d = 1; qs[0] = grid entry 1 (0x04040414: magnitudes 20, 4, 4, 4), qs[1..3] = entry
  // 0 (4, 4, 4, 4); the first word 0x30000083: scale 3 (db = (1 * 3.5) * 0.5 = 1.75), signs of
  // elements 0-7 = 3 (elements 0 and 1 negative; two bits: parity 0), of elements 8-15 = 1 (one
  // bit: the parity sets the eighth, element 15). The second word 0: db = 0.25.
  Bytes iq3(98, 0);
  iq3[1] = 0x3C;
  iq3[2] = 1;
  iq3[66] = 0x83;
  iq3[69] = 0x30;
  y = decode(kGgmlIQ3_XXS, iq3, 256);
  EXPECT_EQ(y[0], -35.0f);  // 1.75 * 20, negative
  EXPECT_EQ(y[1], -7.0f);
  EXPECT_EQ(y[2], 7.0f);
  EXPECT_EQ(y[4], 7.0f);  // qs[1]
  EXPECT_EQ(y[8], -7.0f);
  EXPECT_EQ(y[9], 7.0f);
  EXPECT_EQ(y[15], -7.0f);  // the parity sign
  EXPECT_EQ(y[32], 1.0f);   // 0.25 * 4
}

TEST(GgmlDequant, RefusesWrongSizes) {
  std::vector<float> out(32);
  EXPECT_FALSE(ggml_dequantize_row(kGgmlQ4_0, Bytes(17), out));
  std::vector<float> odd(31);
  EXPECT_FALSE(ggml_dequantize_row(kGgmlQ4_0, Bytes(18), odd));
  std::vector<float> k(256);
  EXPECT_FALSE(ggml_dequantize_row(16, Bytes(66), k));  // IQ2_XXS: no decoder
  EXPECT_FALSE(ggml_dequantize_row(kGgmlIQ3_XXS, Bytes(97), k));
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

TEST(GgufSplitName, ParsesOnlyLlamaCppsPattern) {
  const auto n = gguf_split_name("Model-Q4_K_M-00002-of-00010.gguf");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->prefix, "Model-Q4_K_M");
  EXPECT_EQ(n->part, 2u);
  EXPECT_EQ(n->count, 10u);
  for (const char* bad :
       {"model.gguf", "m-00000-of-00002.gguf", "m-00003-of-00002.gguf", "m-0001-of-00002.gguf",
        "m-00001-of-00002.safetensors", "m-00001_of-00002.gguf", "-00001-of-00002.gguf",
        "m-0000a-of-00002.gguf"}) {
    EXPECT_FALSE(gguf_split_name(bad)) << bad;
  }
}

}  // namespace
}  // namespace qrepack
