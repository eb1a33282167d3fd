#include "qrepack/checkpoint/glm_moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "checkpoint/moe_config_json.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/fixtures/moe_fp8.h"

namespace qrepack {
namespace {

TEST(GlmMoe, CountMatchesTheListForEveryShape) {
  MoeConfig base = moe_fixture_config(FixturePreset::kTiny);
  for (std::uint64_t q : {std::uint64_t{0}, base.q_lora_rank}) {
    for (std::uint64_t heads : {std::uint64_t{0}, std::uint64_t{2}}) {
      for (std::uint64_t nextn : {0, 1, 2}) {
        MoeConfig c = base;
        c.q_lora_rank = q;
        c.index_n_heads = heads;
        c.num_nextn_predict_layers = nextn;
        const auto list = glm_moe_weights(c);
        EXPECT_EQ(glm_moe_weight_count(c), list.size()) << q << " " << heads << " " << nextn;
        const auto side = std::count_if(list.begin(), list.end(),
                                        [](const ModelWeight& w) { return !w.main_pass; });
        // Indexer: 5 per layer (main and MTP layers); MTP: a MoE layer plus 4 of its own.
        const std::uint64_t per_attn = (q ? 9 : 7) + (heads ? 5 : 0);
        EXPECT_EQ(static_cast<std::uint64_t>(side),
                  (heads ? 5 * c.num_hidden_layers : 0) + nextn * (per_attn + 4 + 5 + 24));
      }
    }
  }
  MoeConfig c = base;
  c.q_lora_rank = 0;
  const auto list = glm_moe_weights(c);
  const auto q = std::find_if(list.begin(), list.end(), [](const ModelWeight& w) {
    return w.name == "model.layers.0.self_attn.q_proj.weight";
  });
  ASSERT_NE(q, list.end());
  EXPECT_EQ(q->shape, (std::vector<std::uint64_t>{4 * 32, 128}));
}

TEST(GlmMoe, ConfigReadsForwardFieldsStrictly) {
  auto j = nlohmann::json::parse(
      moe_config_to_json(moe_fixture_config(FixturePreset::kTiny),
                         fp8_block_quantization_config(moe_fixture_config(FixturePreset::kTiny))));
  auto c = moe_config_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->index_topk, 4096u);
  EXPECT_EQ(c->num_nextn_predict_layers, 1u);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->rope_type, "default");
  j["q_lora_rank"] = nullptr;
  j.erase("rope_parameters");
  j["rope_theta"] = 1e6;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}};
  c = moe_config_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->q_lora_rank, 0u);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_type, "yarn");
  for (const auto& [key, bad] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"rope_interleave", "yes"},
           {"n_group", 0},
           {"routed_scaling_factor", "2.5"},
           {"num_nextn_predict_layers", 17},
           {"index_head_dim", 4}}) {  // below qk_rope_head_dim 8 with indexer heads
    auto k = j;
    k[key] = bad;
    const auto r = moe_config_from_json(k);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().kind(), ErrorKind::kInvalidConfig) << key;
  }
  auto missing = j;
  missing.erase("q_lora_rank");
  EXPECT_FALSE(moe_config_from_json(missing).ok());
}

}  // namespace
}  // namespace qrepack
