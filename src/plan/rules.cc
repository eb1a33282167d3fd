#include "qrepack/plan/rules.h"

#include <array>
#include <charconv>

#include "qrepack/checkpoint/family.h"

namespace qrepack {
namespace {

using D = Disposition;
using W = WeightClass;

// reference/colibri.md §1.3 (the reference converter's classify) and §3.4 (what the engine
// loads). Norms, biases and the router stay as stored: the engine reads them as floats.
constexpr Rule kMtpLayer{"mtp_layer",
                         Match::kMtpLayer,
                         "",
                         D::kDrop,
                         W::kNorm,
                         "layer index >= num_hidden_layers: the MTP head (kept as stored with "
                         "--keep-mtp)"};
constexpr Rule kIndexer{"dsa_indexer", Match::kContains,
                        ".indexer.",   D::kDrop,
                        W::kNorm,      "DSA indexer weights (kept as stored with --keep-indexer)"};
constexpr Rule kRouterBias{"router_bias", Match::kSuffix, ".mlp.gate.e_score_correction_bias",
                           D::kKeep,      W::kRouter,     "router bias stays F32"};
constexpr Rule kRouter{
    "router", Match::kSuffix, ".mlp.gate.weight",
    D::kKeep, W::kRouter,     "router weight stays as stored (the engine reads it as float)"};
constexpr Rule kNormRule{"norm",        Match::kSuffix,
                         "norm.weight", D::kKeep,
                         W::kNorm,      "RMSNorm weights (layer, q/k, kv_a) stay as stored"};
constexpr Rule kBias{"bias",   Match::kSuffix, ".bias",
                     D::kKeep, W::kNorm,       "biases (Qwen2 q/k/v) stay as stored"};
constexpr Rule kEmbed{"embed",      Match::kExact, "model.embed_tokens.weight",
                      D::kQuantize, W::kIo,        "class io"};
constexpr Rule kLmHead{"lm_head",    Match::kExact, "lm_head.weight",
                       D::kQuantize, W::kIo,        "class io"};
constexpr Rule kRouted{"routed_expert", Match::kContains, ".mlp.experts.",
                       D::kQuantize,    W::kRoutedExpert, "class experts"};
constexpr Rule kShared{"shared_expert", Match::kContains, ".mlp.shared_experts.",
                       D::kQuantize,    W::kSharedExpert, "class shared"};
constexpr Rule kOProj{"o_proj",     Match::kSuffix, ".self_attn.o_proj.weight",
                      D::kQuantize, W::kOProj,      "class o_proj"};
constexpr Rule kKvB{"kv_b",       Match::kSuffix, ".self_attn.kv_b_proj.weight",
                    D::kQuantize, W::kKvB,        "class kv_b (MLA)"};
constexpr Rule kAttention{"attention",   Match::kContains,
                          ".self_attn.", D::kQuantize,
                          W::kAttention, "class attn (MLA q_a, q_b, kv_a_with_mqa; GQA q, k, v)"};
// The passes' own rules (--mtp, --indexer).
constexpr Rule kOtherPass{
    "other_pass", Match::kExact, "",
    D::kDrop,     W::kNorm,      "converted by another pass (the main run, --mtp or --indexer)"};
constexpr Rule kMtpProj{"mtp_proj",   Match::kSuffix, ".eh_proj.weight",
                        D::kQuantize, W::kMtp,        "class mtp (--mtp: the MTP head's eh_proj)"};
constexpr Rule kMtpEmbed{
    "mtp_embed",  Match::kSuffix, ".embed_tokens.weight",
    D::kQuantize, W::kMtp,        "class mtp (--mtp: the MTP head's embedding)"};
constexpr Rule kMtpHead{"mtp_head",   Match::kSuffix, ".shared_head.head.weight",
                        D::kQuantize, W::kMtp,        "class mtp (--mtp: the MTP head's lm head)"};
constexpr Rule kIndexerProj{"indexer",    Match::kContains, ".indexer.",
                            D::kQuantize, W::kIndexer,      "class indexer (--indexer)"};
constexpr Rule kDenseMlp{"dense_mlp",  Match::kContains,
                         ".mlp.",      D::kQuantize,
                         W::kDenseMlp, "class dense (gate/up/down_proj of the dense layers)"};

// MLA families (GLM-MoE-DSA, DeepSeek-V3, Kimi-K2), and the table of a checkpoint without a
// known family.
constexpr std::array kMlaRules = {kMtpLayer, kIndexer, kRouterBias, kRouter,  kNormRule,
                                  kBias,     kEmbed,   kLmHead,     kRouted,  kShared,
                                  kOProj,    kKvB,     kAttention,  kDenseMlp};
// GQA MoE families (MiniMax, Qwen3-MoE): no indexer, no shared experts.
constexpr std::array kGqaMoeRules = {kMtpLayer, kRouterBias, kRouter, kNormRule,  kBias,    kEmbed,
                                     kLmHead,   kRouted,     kOProj,  kAttention, kDenseMlp};
constexpr std::array kDenseRules = {kNormRule, kBias, kEmbed,     kLmHead,
                                    kOProj,    kKvB,  kAttention, kDenseMlp};
// Rules the MTP pass tries first in the MTP layers, and the indexer pass's whole table.
constexpr std::array kMtpPassRules = {kIndexer, kMtpProj, kMtpEmbed, kMtpHead};
constexpr std::array kIndexerPassRules = {kNormRule, kBias, kIndexerProj};

// Integer after the first "layers." component, or nullopt.
std::optional<std::uint64_t> layer_index(std::string_view name) {
  const auto p = name.find("layers.");
  if (p == std::string_view::npos) return std::nullopt;
  const char* b = name.data() + p + 7;
  const char* e = name.data() + name.size();
  std::uint64_t v = 0;
  const auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr == b || (r.ptr != e && *r.ptr != '.')) return std::nullopt;
  return v;
}

bool matches(const Rule& r, std::string_view name, const RuleContext& ctx) {
  switch (r.match) {
    case Match::kExact:
      return name == r.pattern;
    case Match::kSuffix:
      return name.ends_with(r.pattern);
    case Match::kContains:
      return name.find(r.pattern) != std::string_view::npos;
    case Match::kMtpLayer: {
      const auto l = layer_index(name);
      return l && *l >= ctx.num_hidden_layers;
    }
  }
  return false;
}

}  // namespace

const char* disposition_name(Disposition d) {
  switch (d) {
    case D::kQuantize:
      return "quantize";
    case D::kKeep:
      return "keep";
    case D::kDrop:
      return "drop";
  }
  return "?";
}

std::span<const Rule> family_rules(const MoeConfig* config) {
  if (!config) return kMlaRules;
  switch (family(config->family).rules) {
    case RuleTable::kGqaMoe:
      return kGqaMoeRules;
    case RuleTable::kDense:
      return kDenseRules;
    case RuleTable::kMla:
      break;
  }
  return kMlaRules;
}

const char* convert_pass_name(ConvertPass p) {
  switch (p) {
    case ConvertPass::kMtp:
      return "mtp";
    case ConvertPass::kIndexer:
      return "indexer";
    case ConvertPass::kMain:
      break;
  }
  return "main";
}

ConvertPass weight_pass(std::string_view name, std::uint64_t num_hidden_layers) {
  const auto l = layer_index(name);
  if (l && *l >= num_hidden_layers) return ConvertPass::kMtp;
  if (l && name.find(kIndexer.pattern) != std::string_view::npos) return ConvertPass::kIndexer;
  return ConvertPass::kMain;
}

bool pass_converts(std::string_view name, const RuleContext& ctx) {
  if (weight_pass(name, ctx.num_hidden_layers) != ctx.pass) return false;
  const auto m = classify_weight(name, ctx);
  return m && m->disposition != D::kDrop;
}

std::optional<RuleMatch> classify_weight(std::string_view name, const RuleContext& ctx) {
  std::span<const Rule> first;
  if (ctx.pass != ConvertPass::kMain) {
    if (weight_pass(name, ctx.num_hidden_layers) != ctx.pass) {
      return RuleMatch{&kOtherPass, D::kDrop};
    }
    if (ctx.pass == ConvertPass::kIndexer) {
      for (const Rule& r : kIndexerPassRules) {
        if (matches(r, name, ctx)) return RuleMatch{&r, r.disposition};
      }
      return std::nullopt;
    }
    first = kMtpPassRules;
  }
  for (const Rule& r : first) {
    if (matches(r, name, ctx)) return RuleMatch{&r, r.disposition};
  }
  for (const Rule& r : ctx.rules) {
    if (ctx.pass == ConvertPass::kMtp && r.match == Match::kMtpLayer) continue;
    if (!matches(r, name, ctx)) continue;
    Disposition d = r.disposition;
    if ((r.name == "mtp_layer" && ctx.keep_mtp) || (r.name == "dsa_indexer" && ctx.keep_indexer)) {
      d = D::kKeep;
    }
    return RuleMatch{&r, d};
  }
  return std::nullopt;
}

}  // namespace qrepack
