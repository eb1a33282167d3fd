#include "qrepack/checkpoint/family.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/moe_config_json.h"
#include "qrepack/fixtures/moe_fp8.h"

namespace qrepack {
namespace {

TEST(FamilyTable, ModelTypesFindTheirRows) {
  EXPECT_EQ(family_for_model_type("glm_moe_dsa")->id, FamilyId::kGlmMoeDsa);
  EXPECT_EQ(family_for_model_type("deepseek_v3")->id, FamilyId::kDeepseekV3);
  EXPECT_EQ(family_for_model_type("kimi_k2")->id, FamilyId::kKimiK2);
  // The engine's converter takes any model_type starting with "minimax" as MiniMax.
  EXPECT_EQ(family_for_model_type("minimax_m2")->id, FamilyId::kMiniMax);
  EXPECT_EQ(family_for_model_type("minimax_m3_vl")->id, FamilyId::kMiniMax);
  EXPECT_EQ(family_for_model_type("qwen3_moe")->id, FamilyId::kQwen3Moe);
  for (const char* t : {"llama", "mistral", "qwen2", "qwen3"}) {
    EXPECT_EQ(family_for_model_type(t)->id, FamilyId::kDense) << t;
  }
  EXPECT_EQ(family_for_model_type("qwen2_moe"), nullptr);
  EXPECT_EQ(family_for_model_type("gpt_neox"), nullptr);
  EXPECT_NE(known_model_types().find("kimi_k2"), std::string::npos);
}

TEST(FamilyTable, MiniMaxNamesMapAsTheEnginesConverterMapsThem) {
  const struct {
    const char* raw;
    const char* engine;
  } cases[] = {
      {"model.layers.0.block_sparse_moe.experts.3.w1.weight",
       "model.layers.0.mlp.experts.3.gate_proj.weight"},
      {"model.layers.0.block_sparse_moe.experts.3.w3.weight",
       "model.layers.0.mlp.experts.3.up_proj.weight"},
      {"model.layers.0.block_sparse_moe.experts.3.w2.weight_scale_inv",
       "model.layers.0.mlp.experts.3.down_proj.weight_scale_inv"},
      {"model.layers.7.block_sparse_moe.gate.weight", "model.layers.7.mlp.gate.weight"},
      {"model.layers.7.block_sparse_moe.e_score_correction_bias",
       "model.layers.7.mlp.gate.e_score_correction_bias"},
      {"language_model.model.layers.1.self_attn.q_norm.weight",
       "model.layers.1.self_attn.q_norm.weight"},
      {"model.language_model.layers.1.block_sparse_moe.experts.0.w2.weight",
       "model.layers.1.mlp.experts.0.down_proj.weight"},
      {"language_model.lm_head.weight", "lm_head.weight"},
      // w1 outside the experts is not renamed.
      {"model.layers.1.self_attn.w1.weight", "model.layers.1.self_attn.w1.weight"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(map_source_name(NameMap::kMiniMax, c.raw), c.engine) << c.raw;
  }
  for (const char* v : {"vision_tower.blocks.0.attn.qkv.weight", "model.vision_tower.x.weight",
                        "multi_modal_projector.linear_1.weight", "visual.patch_embed.weight"}) {
    EXPECT_FALSE(map_source_name(NameMap::kMiniMax, v).has_value()) << v;
  }
  EXPECT_EQ(map_source_name(NameMap::kIdentity, "model.layers.0.block_sparse_moe.x"),
            "model.layers.0.block_sparse_moe.x");
  // The fixture writes source names through the inverse: every engine name round-trips.
  const auto cfg = family_fixture_config("minimax");
  for_each_model_weight(*cfg, [&](const ModelWeight& w) {
    const std::string raw = unmap_engine_name(NameMap::kMiniMax, w.name);
    EXPECT_EQ(map_source_name(NameMap::kMiniMax, raw), w.name) << raw;
  });
}

TEST(FamilyTable, CountsMatchTheListsForEveryFamilyAndVariant) {
  for (std::string_view name : family_fixture_names()) {
    MoeConfig base = *family_fixture_config(name);
    for (int variant = 0; variant < 4; ++variant) {
      MoeConfig c = base;
      if (variant == 1) c.tie_word_embeddings = !c.tie_word_embeddings;
      if (variant == 2) c.attention_bias = !c.attention_bias;
      if (variant == 3 && c.family == FamilyId::kQwen3Moe) c.decoder_sparse_step = 2;
      std::uint64_t n = 0;
      for_each_model_weight(c, [&](const ModelWeight&) { ++n; });
      EXPECT_EQ(model_weight_count(c), n) << name << " variant " << variant;
    }
  }
}

TEST(FamilyConfig, EachFamilysConfigRoundTripsThroughItsOwnKeys) {
  for (std::string_view name : family_fixture_names()) {
    const MoeConfig c = *family_fixture_config(name);
    const auto j = nlohmann::json::parse(moe_config_to_json(c, nullptr));
    auto back = moe_config_from_json(j);
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().to_string();
    EXPECT_EQ(back->family, c.family) << name;
    std::uint64_t a = 0, b = 0;
    for_each_model_weight(c, [&](const ModelWeight&) { ++a; });
    for_each_model_weight(*back, [&](const ModelWeight&) { ++b; });
    EXPECT_EQ(a, b) << name;
  }
}

TEST(FamilyConfig, TextConfigIsFlattenedAndFieldsAreChecked) {
  nlohmann::json text =
      nlohmann::json::parse(moe_config_to_json(*family_fixture_config("minimax"), nullptr));
  nlohmann::json outer = {{"model_type", "minimax_m3_vl"}, {"text_config", text}};
  outer["text_config"]["model_type"] = "minimax_m2";
  outer["vision_config"] = {{"hidden_size", 32}};
  auto c = moe_config_from_json(outer);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->family, FamilyId::kMiniMax);
  EXPECT_EQ(c->model_type, "minimax_m3_vl");
  EXPECT_EQ(c->n_routed_experts, 8u);

  nlohmann::json llama = nlohmann::json::parse(
      R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 128})");
  auto l = moe_config_from_json(llama);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(kv_heads(*l), 4u);
  EXPECT_EQ(attn_head_dim(*l), 16u);
  llama["num_key_value_heads"] = 3u;
  EXPECT_FALSE(moe_config_from_json(llama).ok());  // 4 heads are not a multiple of 3
  llama["num_key_value_heads"] = 2u;
  llama.erase("intermediate_size");
  auto missing = moe_config_from_json(llama);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("lacks intermediate_size"), std::string::npos);
  llama.erase("model_type");
  auto none = moe_config_from_json(llama);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("no model_type"), std::string::npos);
}

}  // namespace
}  // namespace qrepack
