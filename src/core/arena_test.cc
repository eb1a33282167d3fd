#include "qrepack/core/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace qrepack {
namespace {

// Copies made across many blocks keep their bytes while later copies are added.
TEST(Arena, CopiesNeverMoveAcrossBlocks) {
  Arena a;
  std::vector<std::string> want;
  std::vector<std::string_view> got;
  for (int i = 0; i < 20000; ++i) {  // about 600 KB of names: several 64 KiB blocks
    want.push_back("model.layers." + std::to_string(i) + ".mlp.experts.w");
    got.push_back(a.copy(want.back()));
    EXPECT_NE(got.back().data(), want.back().data());
  }
  EXPECT_GT(a.capacity(), 64u * 1024u);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]);
}

TEST(Arena, ShapesAreAlignedAndBigCopiesGetTheirOwnBlock) {
  Arena a;
  a.copy(std::string_view("abc"));  // leaves the cursor unaligned
  const std::vector<std::uint64_t> dims{7, 128, 3};
  const auto s = a.copy(std::span<const std::uint64_t>(dims));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.data()) % alignof(std::uint64_t), 0u);
  EXPECT_EQ(std::vector<std::uint64_t>(s.begin(), s.end()), dims);
  const std::string big(100000, 'x');  // larger than a block
  const auto b = a.copy(big);
  EXPECT_EQ(b, big);
  const auto after = a.copy(std::string_view("tail"));  // the open block still serves
  EXPECT_EQ(after, "tail");
  EXPECT_EQ(std::vector<std::uint64_t>(s.begin(), s.end()), dims);
  EXPECT_TRUE(a.copy(std::string_view()).empty());
  EXPECT_TRUE(a.copy(std::span<const std::uint64_t>()).empty());
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

// A small header's arena stays small: blocks grow from 1 KiB, so 10,000 small shards do not
// hold 64 KiB each (issue: 651 MB of inspect at 10,000 shards).
TEST(Arena, ASmallArenaHoldsASmallBlock) {
  Arena a;
  a.copy(std::string_view("model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(a.capacity(), 1024u);
  for (int i = 0; i < 100; ++i) a.copy(std::string(100, 'n'));  // 10 kB: 1 + 2 + 4 + 8 KiB
  EXPECT_LE(a.capacity(), 2u * 10000u + 1024u);
}

}  // namespace
}  // namespace qrepack
