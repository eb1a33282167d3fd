#include "qrepack/core/name_index.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qrepack {
namespace {

TEST(NameIndex, FindsEachNameByBinarySearchAndTheFirstOfARepeat) {
  const std::vector<std::string> names = {"b.weight", "a.weight", "c", "a.weight", "a"};
  const auto name_of = [&](std::size_t i) -> const std::string& { return names[i]; };
  const NameIndex index = NameIndex::build(names.size(), name_of);
  EXPECT_EQ(index.order(), (std::vector<std::uint32_t>{4, 1, 3, 0, 2}));  // stable: 1 before 3
  EXPECT_EQ(index.find("a.weight", name_of), 1u);
  EXPECT_EQ(index.find("c", name_of), 2u);
  EXPECT_EQ(index.find("a", name_of), 4u);
  EXPECT_FALSE(index.find("a.weigh", name_of));
  EXPECT_FALSE(index.find("d", name_of));
  EXPECT_FALSE(index.find("", name_of));
  const auto repeat = index.first_repeat(name_of);
  ASSERT_TRUE(repeat);
  EXPECT_EQ(repeat->first, 1u);
  EXPECT_EQ(repeat->second, 3u);
}

TEST(NameIndex, UniqueAndEmptyIndexesHaveNoRepeat) {
  const std::vector<std::string> names = {"x", "y", "w"};
  const auto name_of = [&](std::size_t i) -> const std::string& { return names[i]; };
  EXPECT_FALSE(NameIndex::build(names.size(), name_of).first_repeat(name_of));
  const NameIndex empty = NameIndex::build(0, name_of);
  EXPECT_FALSE(empty.first_repeat(name_of));
  EXPECT_FALSE(empty.find("x", name_of));
}

}  // namespace
}  // namespace qrepack
