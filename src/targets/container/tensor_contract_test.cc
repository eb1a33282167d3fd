#include "targets/container/tensor_contract.h"

#include <gtest/gtest.h>

namespace qrepack {
namespace {

using Indices = std::optional<std::vector<std::uint64_t>>;

TEST(TensorContract, NameIndexIsCanonicalDecimal) {
  EXPECT_EQ(name_index("0"), 0u);
  EXPECT_EQ(name_index("17"), 17u);
  EXPECT_EQ(name_index("999999999"), 999999999u);
  for (const char* bad : {"", "01", "00", "1a", "-1", " 1", "1234567890"}) {
    EXPECT_FALSE(name_index(bad)) << bad;
  }
}

TEST(TensorContract, MatchIndicesTakesEachHoleInOrder) {
  constexpr std::string_view p = "model.layers.{}.mlp.experts.{}.up_proj.weight";
  EXPECT_EQ(match_indices(p, "model.layers.3.mlp.experts.12.up_proj.weight"), (Indices{{3, 12}}));
  EXPECT_EQ(match_indices("blk.{}", "blk.40"), (Indices{{40}}));
  EXPECT_EQ(match_indices("norm.weight", "norm.weight"), (Indices{std::vector<std::uint64_t>{}}));
  for (const char* bad : {"model.layers.3.mlp.experts.012.up_proj.weight",
                          "model.layers.03.mlp.experts.1.up_proj.weight",
                          "model.layers.3.mlp.experts.1.up_proj.weight.extra",
                          "model.layers.3.mlp.experts.1.gate_proj.weight",
                          "model.layers..mlp.experts.1.up_proj.weight",
                          "model.layers.3.4.mlp.experts.1.up_proj.weight", "x"}) {
    EXPECT_FALSE(match_indices(p, bad)) << bad;
  }
}

TEST(TensorContract, ChecksUnknownMisshapenAndMissingNames) {
  TensorContract c;
  c.add("embed", {8, 4});
  c.per_layer(2, "layers.{}.", {{"norm", {4}}, {"proj", {4, 4}}});
  EXPECT_EQ(c.tensors().size(), 5u);
  EXPECT_TRUE(c.contains("layers.1.proj"));
  EXPECT_FALSE(c.contains("layers.2.proj"));
  std::vector<std::string> problems;
  const std::vector<std::uint64_t> embed{8, 4}, vec{4}, wrong{4, 5};
  EXPECT_TRUE(c.check("embed", embed, problems));
  EXPECT_TRUE(c.check("layers.0.norm", vec, problems));
  EXPECT_FALSE(c.check("layers.0.proj", wrong, problems));
  EXPECT_FALSE(c.check("layers.0.stray", vec, problems));
  c.mark_present("layers.1.norm");
  EXPECT_TRUE(c.seen("layers.0.proj"));  // present, though misshapen
  EXPECT_FALSE(c.seen("layers.1.proj"));
  c.report_missing(problems);
  EXPECT_EQ(problems, (std::vector<std::string>{
                          "layers.0.proj: shape [4, 5], config implies [4, 4]",
                          "layers.0.stray",
                          "missing layers.1.proj",
                      }));
}

}  // namespace
}  // namespace qrepack
