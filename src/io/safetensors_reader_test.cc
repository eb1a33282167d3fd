#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/io/safetensors.h"
#include "safetensors_bytes.h"
#include "test_util.h"

namespace qrepack {
namespace {

using testing::dims;
using testing::safetensors_bytes;

Result<SafetensorsFile> parse(std::vector<std::uint8_t> bytes) {
  return SafetensorsFile::from_source(
      std::make_shared<MemorySource>("t.safetensors", std::move(bytes)));
}

ErrorKind kind_of(std::vector<std::uint8_t> bytes) {
  auto r = parse(std::move(bytes));
  EXPECT_FALSE(r.ok());
  return r.ok() ? ErrorKind::kUsage : r.error().kind();
}

// reference/serialization.md A6: the reference crate's golden files.
TEST(SafetensorsReader, ReadsTheCrateGoldenF32Tensor) {
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  auto bytes = safetensors_bytes(header, 0);
  for (int i = 0; i < 6; ++i) {
    const float v = static_cast<float>(i);
    std::uint8_t b[4];
    std::memcpy(b, &v, 4);
    bytes.insert(bytes.end(), b, b + 4);
  }
  auto f = parse(bytes);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  ASSERT_EQ(f->tensors().size(), 1u);
  const TensorEntry& t = f->tensors()[0];
  EXPECT_EQ(t.name, "attn.0");
  EXPECT_EQ(t.dtype, Dtype::kF32);
  EXPECT_EQ(dims(t.shape), (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(f->header().data_start(), 72u);
  std::vector<std::uint8_t> out(8);
  ASSERT_TRUE(f->read(t, 16, out).ok());
  float v4, v5;
  std::memcpy(&v4, out.data(), 4);
  std::memcpy(&v5, out.data() + 4, 4);
  EXPECT_EQ(v4, 4.0f);
  EXPECT_EQ(v5, 5.0f);
  std::vector<std::uint8_t> past(9);
  EXPECT_EQ(f->read(t, 16, past).error().kind(), ErrorKind::kIoRead);
}

TEST(SafetensorsReader, AcceptsEmptyAndWhitespaceAndMetadata) {
  EXPECT_TRUE(parse(safetensors_bytes("{}      ", 0)).ok());
  EXPECT_TRUE(parse(safetensors_bytes("{}\r \t\n", 0)).ok());
  EXPECT_TRUE(parse(safetensors_bytes("\t\n{}\r ", 0)).ok());
  auto f = parse(safetensors_bytes(R"({"__metadata__":{"framework":"pt"}})"
                                   "     ",
                                   0));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header().metadata.at("framework"), "pt");
  // Zero-element tensors and scalars.
  EXPECT_TRUE(parse(safetensors_bytes(R"({"z":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},)"
                                      R"("s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}})",
                                      2))
                  .ok());
  // F4 counts logical elements: [1,2] is one byte.
  EXPECT_TRUE(
      parse(safetensors_bytes(R"({"attn.0":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}})", 1))
          .ok());
}

TEST(SafetensorsReader, TensorsAreSortedByOffset) {
  auto f = parse(safetensors_bytes(R"({"b":{"dtype":"U8","shape":[3],"data_offsets":[2,5]},)"
                                   R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                                   5));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tensors()[0].name, "a");
  EXPECT_EQ(f->tensors()[1].name, "b");
}

// Entries view names and shapes in the header's arena: a copy of the header keeps them alive
// after the original is gone (ASan would report a read of freed memory).
TEST(SafetensorsReader, ACopiedHeaderOutlivesItsOriginal) {
  std::optional<SafetensorsHeader> copy;
  {
    auto f = parse(
        safetensors_bytes(R"({"layer.w":{"dtype":"U8","shape":[2,3],"data_offsets":[0,6]}})", 6));
    ASSERT_TRUE(f.ok());
    copy = f->header();
  }
  ASSERT_EQ(copy->tensors.size(), 1u);
  EXPECT_EQ(copy->tensors[0].name, "layer.w");
  EXPECT_EQ(
      std::vector<std::uint64_t>(copy->tensors[0].shape.begin(), copy->tensors[0].shape.end()),
      (std::vector<std::uint64_t>{2, 3}));
}

// The crate's rejection cases (A6), mapped to our kinds.
TEST(SafetensorsReader, CrateRejectionCases) {
  EXPECT_EQ(kind_of({0x3C, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF}), ErrorKind::kHeaderTooLarge);
  EXPECT_EQ(kind_of({}), ErrorKind::kHeaderTooSmall);
  EXPECT_EQ(kind_of({60, 0, 0, 0, 0, 0, 0, 0}), ErrorKind::kHeaderLengthBeyondFile);
  EXPECT_EQ(kind_of({1, 0, 0, 0, 0, 0, 0, 0, 0xFF}), ErrorKind::kHeaderNotUtf8);
  EXPECT_EQ(kind_of({1, 0, 0, 0, 0, 0, 0, 0, '{'}), ErrorKind::kHeaderNotJson);
  EXPECT_EQ(
      kind_of(safetensors_bytes(R"({"t":{"dtype":"I32","shape":[2,2],"data_offsets":[0,4]}})", 4)),
      ErrorKind::kTensorSizeMismatch);
  EXPECT_EQ(
      kind_of(safetensors_bytes(
          R"({"t":{"dtype":"F32","shape":[2,18446744073709551614],"data_offsets":[0,4]}})", 4)),
      ErrorKind::kSizeOverflow);
  std::string ten = "{";
  for (int i = 0; i < 10; ++i) {
    ten += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
           R"(":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  }
  ten += "}";
  EXPECT_EQ(kind_of(safetensors_bytes(ten, 16)), ErrorKind::kOffsetOverlap);
  const std::string one = R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(kind_of(safetensors_bytes(one, 14)), ErrorKind::kTruncatedData);
  EXPECT_EQ(kind_of(safetensors_bytes(one, 18)), ErrorKind::kTrailingBytes);
  EXPECT_TRUE(parse(safetensors_bytes(one, 16)).ok());
}

struct BadCase {
  const char* what;
  std::string header;
  std::size_t data;
  ErrorKind kind;
};

// One hand-made bad file per rule; each must give its own kind and name the tensor.
TEST(SafetensorsReader, BadFileCorpusGivesOneKindPerRule) {
  const std::vector<BadCase> cases = {
      {"array header", "[]", 0, ErrorKind::kHeaderNotObject},
      {"bad json", R"({"t":)", 0, ErrorKind::kHeaderNotJson},
      {"duplicate key",
       R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
       2, ErrorKind::kDuplicateKey},
      // The header is parsed member by member: repeats inside an entry, a second
      // __metadata__, a root that is no object and a syntax error after good members are
      // still refused with their own kinds.
      {"duplicate key in entry",
       R"({"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1,
       ErrorKind::kDuplicateKey},
      {"duplicate metadata", R"({"__metadata__":{},"__metadata__":{}})", 0,
       ErrorKind::kDuplicateKey},
      {"scalar header", "5", 0, ErrorKind::kHeaderNotObject},
      {"bad json after a good entry", R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)", 1,
       ErrorKind::kHeaderNotJson},
      {"metadata value not string", R"({"__metadata__":{"n":1}})", 0, ErrorKind::kInvalidMetadata},
      {"metadata not object", R"({"__metadata__":"x"})", 0, ErrorKind::kInvalidMetadata},
      {"entry not object", R"({"t":5})", 0, ErrorKind::kInvalidTensorEntry},
      {"missing dtype", R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1,
       ErrorKind::kInvalidTensorEntry},
      {"unknown dtype", R"({"t":{"dtype":"F8_E4M3FNUZ","shape":[1],"data_offsets":[0,1]}})", 1,
       ErrorKind::kUnknownDtype},
      {"lowercase dtype", R"({"t":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", 2,
       ErrorKind::kUnknownDtype},
      {"negative dim", R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1,
       ErrorKind::kInvalidShape},
      {"float dim", R"({"t":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", 2,
       ErrorKind::kInvalidShape},
      {"three offsets", R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1,
       ErrorKind::kInvalidOffsets},
      {"end before begin", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", 1,
       ErrorKind::kInvalidOffsets},
      {"odd F4 count", R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
       ErrorKind::kMisalignedSize},
      {"size mismatch", R"({"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}})", 4,
       ErrorKind::kTensorSizeMismatch},
      {"overlap",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"t":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
       6, ErrorKind::kOffsetOverlap},
      {"gap",
       R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"t":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
       6, ErrorKind::kOffsetGap},
      {"leading gap", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4,
       ErrorKind::kOffsetGap},
      {"trailing bytes", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 3,
       ErrorKind::kTrailingBytes},
      {"truncated", R"({"t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 7,
       ErrorKind::kTruncatedData},
      {"too deep", std::string(100, '[') + std::string(100, ']'), 0, ErrorKind::kHeaderNotJson},
  };
  for (const BadCase& c : cases) {
    auto r = parse(safetensors_bytes(c.header, c.data));
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.error().kind(), c.kind) << c.what << ": " << r.error().to_string();
    EXPECT_EQ(r.error().file(), "t.safetensors") << c.what;
    EXPECT_FALSE(r.error().rule().empty()) << c.what;
    if (c.header.find("\"t\"") != std::string::npos && c.kind != ErrorKind::kDuplicateKey &&
        c.kind != ErrorKind::kTrailingBytes && c.kind != ErrorKind::kTruncatedData &&
        c.kind != ErrorKind::kHeaderNotJson) {
      EXPECT_EQ(r.error().tensor(), "t") << c.what;
    }
  }
}

TEST(SafetensorsReader, HintsAtTheRightSpellingOfADtype) {
  auto r =
      parse(safetensors_bytes(R"({"t":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("did you mean \"BF16\""), std::string::npos);
}

TEST(SafetensorsReader, RecognisesAZipInsteadOfSafetensors) {
  std::vector<std::uint8_t> zip = {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(kind_of(zip), ErrorKind::kNotSafetensors);
}

TEST(SafetensorsReader, Utf8ValidationRejectsOverlongsAndSurrogates) {
  for (std::string bad : {std::string("{\"\xC0\xAF\":1}"), std::string("{\"\xED\xA0\x80\":1}"),
                          std::string("{\"\xF4\x90\x80\x80\":1}")}) {
    EXPECT_EQ(kind_of(safetensors_bytes(bad, 0)), ErrorKind::kHeaderNotUtf8);
  }
}

TEST(SafetensorsReader, PrefixStageIsPure) {
  const std::uint8_t p[8] = {16, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(parse_safetensors_prefix(p, 24).value(), 16u);
  EXPECT_EQ(parse_safetensors_prefix(p, 23).error().kind(), ErrorKind::kHeaderLengthBeyondFile);
  const std::uint8_t big[8] = {0x01, 0xE1, 0xF5, 0x05, 0, 0, 0, 0};  // 100,000,001
  EXPECT_EQ(parse_safetensors_prefix(big, 1ull << 40).error().kind(), ErrorKind::kHeaderTooLarge);
}

}  // namespace
}  // namespace qrepack
