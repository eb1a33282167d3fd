#include "qrepack/plan/rules.h"

#include <gtest/gtest.h>

#include <span>

namespace qrepack {
namespace {

struct Case {
  const char* name;
  const char* rule;
  Disposition d;
};

void expect_rules(std::span<const Case> cases, const RuleContext& ctx) {
  for (const Case& c : cases) {
    const auto m = classify_weight(c.name, ctx);
    ASSERT_TRUE(m.has_value()) << c.name;
    EXPECT_EQ(m->rule->name, c.rule) << c.name;
    EXPECT_EQ(m->disposition, c.d) << c.name;
  }
}

TEST(GlmMoeRules, EveryRealNameGetsItsRule) {
  const RuleContext ctx{family_rules(nullptr), 78};
  const Case cases[] = {
      {"model.embed_tokens.weight", "embed", Disposition::kQuantize},
      {"lm_head.weight", "lm_head", Disposition::kQuantize},
      {"model.norm.weight", "norm", Disposition::kKeep},
      {"model.layers.0.input_layernorm.weight", "norm", Disposition::kKeep},
      {"model.layers.0.self_attn.q_a_layernorm.weight", "norm", Disposition::kKeep},
      {"model.layers.0.self_attn.kv_b_proj.weight", "kv_b", Disposition::kQuantize},
      {"model.layers.0.self_attn.o_proj.weight", "o_proj", Disposition::kQuantize},
      {"model.layers.0.self_attn.q_b_proj.weight", "attention", Disposition::kQuantize},
      {"model.layers.1.mlp.gate_proj.weight", "dense_mlp", Disposition::kQuantize},
      {"model.layers.3.mlp.gate.weight", "router", Disposition::kKeep},
      {"model.layers.3.mlp.gate.e_score_correction_bias", "router_bias", Disposition::kKeep},
      {"model.layers.3.mlp.shared_experts.up_proj.weight", "shared_expert", Disposition::kQuantize},
      {"model.layers.3.mlp.experts.5.gate_proj.weight", "routed_expert", Disposition::kQuantize},
      {"model.layers.5.self_attn.indexer.wk.weight", "dsa_indexer", Disposition::kDrop},
      {"model.layers.78.eh_proj.weight", "mtp_layer", Disposition::kDrop},
      {"model.layers.78.mlp.experts.0.gate_proj.weight", "mtp_layer", Disposition::kDrop},
  };
  expect_rules(cases, ctx);
  EXPECT_EQ(classify_weight("model.layers.3.mlp.experts.5.gate_proj.weight", ctx)->rule->cls,
            WeightClass::kRoutedExpert);
}

// The --mtp pass converts the MTP layer only (its indexer dropped, its own projections class
// mtp); the --indexer pass the main layers' indexers only; each drops the rest as another
// pass's (reference/colibri.md §1.3).
TEST(GlmMoeRules, PassesSplitTheCheckpoint) {
  RuleContext mtp{family_rules(nullptr), 78};
  mtp.pass = ConvertPass::kMtp;
  const Case mtp_cases[] = {
      {"model.layers.78.eh_proj.weight", "mtp_proj", Disposition::kQuantize},
      {"model.layers.78.embed_tokens.weight", "mtp_embed", Disposition::kQuantize},
      {"model.layers.78.shared_head.head.weight", "mtp_head", Disposition::kQuantize},
      {"model.layers.78.shared_head.norm.weight", "norm", Disposition::kKeep},
      {"model.layers.78.enorm.weight", "norm", Disposition::kKeep},
      {"model.layers.78.self_attn.indexer.wk.weight", "dsa_indexer", Disposition::kDrop},
      {"model.layers.78.self_attn.o_proj.weight", "o_proj", Disposition::kQuantize},
      {"model.layers.78.mlp.experts.255.down_proj.weight", "routed_expert", Disposition::kQuantize},
      {"model.layers.77.mlp.experts.0.up_proj.weight", "other_pass", Disposition::kDrop},
      {"model.embed_tokens.weight", "other_pass", Disposition::kDrop},
      {"lm_head.weight", "other_pass", Disposition::kDrop},
  };
  expect_rules(mtp_cases, mtp);
  RuleContext idx{family_rules(nullptr), 78};
  idx.pass = ConvertPass::kIndexer;
  const Case idx_cases[] = {
      {"model.layers.5.self_attn.indexer.wq_b.weight", "indexer", Disposition::kQuantize},
      {"model.layers.5.self_attn.indexer.weights_proj.weight", "indexer", Disposition::kQuantize},
      {"model.layers.5.self_attn.indexer.k_norm.weight", "norm", Disposition::kKeep},
      {"model.layers.5.self_attn.indexer.k_norm.bias", "bias", Disposition::kKeep},
      {"model.layers.78.self_attn.indexer.wk.weight", "other_pass", Disposition::kDrop},
      {"model.layers.5.self_attn.q_a_proj.weight", "other_pass", Disposition::kDrop},
  };
  expect_rules(idx_cases, idx);
  EXPECT_EQ(classify_weight("model.layers.5.self_attn.indexer.wk.weight", idx)->rule->cls,
            WeightClass::kIndexer);
  EXPECT_EQ(weight_pass("model.layers.78.self_attn.indexer.wk.weight", 78), ConvertPass::kMtp);
  EXPECT_EQ(weight_pass("model.layers.7.self_attn.indexer.wk.weight", 78), ConvertPass::kIndexer);
  EXPECT_EQ(weight_pass("model.norm.weight", 78), ConvertPass::kMain);
}

TEST(GlmMoeRules, UnknownNamesAreUnclaimedAndKeepFlagsKeep) {
  const RuleContext ctx{family_rules(nullptr), 4};
  EXPECT_FALSE(classify_weight("vision_tower.patch_embed.weight", ctx).has_value());
  EXPECT_FALSE(classify_weight("model.layers.0.some_bias", ctx).has_value());
  RuleContext keep{family_rules(nullptr), 4, true, true};
  EXPECT_EQ(classify_weight("model.layers.4.eh_proj.weight", keep)->disposition,
            Disposition::kKeep);
  EXPECT_EQ(classify_weight("model.layers.1.self_attn.indexer.wq_b.weight", keep)->disposition,
            Disposition::kKeep);
  // "layers.10" is layer 10, not 1.
  EXPECT_EQ(classify_weight("model.layers.10.mlp.gate_proj.weight",
                            RuleContext{family_rules(nullptr), 11})
                ->rule->name,
            "dense_mlp");
  EXPECT_EQ(classify_weight("model.layers.10.mlp.gate_proj.weight",
                            RuleContext{family_rules(nullptr), 10})
                ->rule->name,
            "mtp_layer");
}

TEST(FamilyRules, GqaAndDenseNamesGetTheirRules) {
  MoeConfig dense;
  dense.family = FamilyId::kDense;
  const RuleContext d{family_rules(&dense), 2};
  EXPECT_EQ(classify_weight("model.layers.0.self_attn.k_proj.weight", d)->rule->name, "attention");
  EXPECT_EQ(classify_weight("model.layers.0.self_attn.k_proj.bias", d)->rule->name, "bias");
  EXPECT_EQ(classify_weight("model.layers.0.self_attn.q_norm.weight", d)->rule->name, "norm");
  EXPECT_EQ(classify_weight("model.layers.1.mlp.down_proj.weight", d)->rule->cls,
            WeightClass::kDenseMlp);
  // The dense table has no MoE or MTP rules: an expert name is unclaimed, not misfiled.
  EXPECT_FALSE(classify_weight("model.layers.1.mlp.experts.0.up_proj.weight", d).has_value() &&
               classify_weight("model.layers.1.mlp.experts.0.up_proj.weight", d)->rule->cls ==
                   WeightClass::kRoutedExpert);
  MoeConfig moe;
  moe.family = FamilyId::kQwen3Moe;
  const RuleContext q{family_rules(&moe), 2};
  EXPECT_EQ(classify_weight("model.layers.1.mlp.experts.7.up_proj.weight", q)->rule->name,
            "routed_expert");
  EXPECT_EQ(classify_weight("model.layers.1.mlp.gate.weight", q)->rule->name, "router");
  EXPECT_EQ(classify_weight("model.layers.2.mlp.gate.weight", q)->rule->name, "mtp_layer");
}

}  // namespace
}  // namespace qrepack
