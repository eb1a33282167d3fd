#include "core/tensor_name.h"

#include <gtest/gtest.h>

#include <string>

namespace qrepack {
namespace {

using namespace std::string_literals;

TEST(TensorName, ControlCharactersAreFoundAndNamed) {
  EXPECT_FALSE(first_control_char("model.layers.0.mlp.experts.7.up_proj.weight"));
  EXPECT_FALSE(first_control_char("caf\xc3\xa9 \xe2\x80\x94 name"));  // é and an em dash
  const auto nul = first_control_char("a\0b"s);
  ASSERT_TRUE(nul);
  EXPECT_EQ(nul->offset, 1u);
  EXPECT_EQ(nul->code, 0u);
  EXPECT_EQ(first_control_char("x\x7f")->code, 0x7Fu);
  EXPECT_EQ(first_control_char("ab\xc2\x85")->code, 0x85u);  // NEL, a C1 control
  EXPECT_EQ(first_control_char("tab\there")->offset, 3u);
  EXPECT_EQ(printable_name("a\0b\nc"s), "a\\u0000b\\u000ac");
  const Status s = check_tensor_name("a\0b"s, ErrorKind::kInvalidTensorEntry);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().rule(), "name.control_char");
  EXPECT_NE(s.error().message().find("a\\u0000b"), std::string::npos);
  EXPECT_TRUE(check_tensor_name("model.norm.weight", ErrorKind::kInvalidTensorEntry).ok());
}

}  // namespace
}  // namespace qrepack
