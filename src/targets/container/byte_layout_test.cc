#include "targets/container/byte_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qrepack {
namespace {

// A 64-byte file: an 8-byte literal header, then two copies from a 100-byte source.
std::vector<ByteFile> sample() {
  ByteFile f{"a.bin", 64, {}};
  BytePiece header;
  header.literal = std::vector<std::uint8_t>(8, 7);
  header.size = 8;
  f.jobs.push_back({{header}});
  f.jobs.push_back({{{8, 16, {}, 0, 0}, {32, 16, {}, 0, 84}}});
  return {f};
}

std::string validate(const std::vector<ByteFile>& files) {
  const std::vector<std::uint64_t> sizes = {100};
  auto st = validate_byte_files(files, sizes);
  return st.ok() ? "" : st.error().to_string();
}

TEST(ByteLayout, ValidatesEveryPiece) {
  EXPECT_EQ(validate(sample()), "");
  auto f = sample();
  f[0].jobs[1].pieces[1].at = 20;  // overlaps the first copy (8..24)
  EXPECT_NE(validate(f).find("two pieces overlap at byte 20"), std::string::npos) << validate(f);
  f = sample();
  f[0].jobs[1].pieces[1].at = 56;  // 56 + 16 > 64
  EXPECT_NE(validate(f).find("does not fit the file's 64"), std::string::npos);
  f = sample();
  f[0].jobs[1].pieces[1].from = 85;  // 85 + 16 > 100
  EXPECT_NE(validate(f).find("lies outside its source"), std::string::npos);
  f = sample();
  f[0].jobs[1].pieces[0].source = 1;  // no such source
  EXPECT_NE(validate(f).find("lies outside its source"), std::string::npos);
  f = sample();
  f[0].jobs[0].pieces[0].size = 9;  // literal of 8 bytes
  EXPECT_NE(validate(f).find("does not fit"), std::string::npos);
  f = sample();
  f[0].jobs[1].pieces[0].size = 0;
  EXPECT_NE(validate(f).find("does not fit"), std::string::npos);
}

std::uint64_t hash(const std::vector<ByteFile>& files) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  hash_byte_files(st, files);
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

TEST(ByteLayout, EveryPieceIsInTheFingerprint) {
  const std::uint64_t base = hash(sample());
  auto f = sample();
  f[0].jobs[1].pieces[1].from = 83;
  EXPECT_NE(hash(f), base);
  f = sample();
  f[0].jobs[0].pieces[0].literal[3] = 1;
  EXPECT_NE(hash(f), base);
  f = sample();
  f[0].name = "b.bin";
  EXPECT_NE(hash(f), base);
  EXPECT_EQ(hash(sample()), base);
}

}  // namespace
}  // namespace qrepack
