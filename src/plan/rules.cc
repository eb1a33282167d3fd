#include "qrepack/plan/rules.h"

#include <array>
#include <charconv>

namespace qrepack {
namespace {

using D = Disposition;
using W = WeightClass;

// reference/colibri.md §1.3 (the reference converter's classify) and §3.4 (what the engine
// loads). Norms and the router stay as stored: the engine reads them as floats.
constexpr std::array kRules = {
    Rule{"mtp_layer", Match::kMtpLayer, "", D::kDrop, W::kNorm,
         "layer index >= num_hidden_layers: the MTP head (kept as stored with --keep-mtp)"},
    Rule{"dsa_indexer", Match::kContains, ".indexer.", D::kDrop, W::kNorm,
         "DSA indexer weights (kept as stored with --keep-indexer)"},
    Rule{"router_bias", Match::kSuffix, ".mlp.gate.e_score_correction_bias", D::kKeep, W::kRouter,
         "router bias stays F32"},
    Rule{"router", Match::kSuffix, ".mlp.gate.weight", D::kKeep, W::kRouter,
         "router weight stays as stored (the engine reads it as float)"},
    Rule{"norm", Match::kSuffix, "norm.weight", D::kKeep, W::kNorm,
         "RMSNorm weights stay as stored"},
    Rule{"embed", Match::kExact, "model.embed_tokens.weight", D::kQuantize, W::kIo, "class io"},
    Rule{"lm_head", Match::kExact, "lm_head.weight", D::kQuantize, W::kIo, "class io"},
    Rule{"routed_expert", Match::kContains, ".mlp.experts.", D::kQuantize, W::kRoutedExpert,
         "class experts"},
    Rule{"shared_expert", Match::kContains, ".mlp.shared_experts.", D::kQuantize, W::kSharedExpert,
         "class shared"},
    Rule{"attention", Match::kContains, ".self_attn.", D::kQuantize, W::kAttention,
         "class attn (q_a, q_b, kv_a_with_mqa, kv_b, o projections)"},
    Rule{"dense_mlp", Match::kContains, ".mlp.", D::kQuantize, W::kDenseMlp,
         "class dense (gate/up/down_proj of the dense layers)"},
};

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

std::span<const Rule> glm_moe_rules() { return kRules; }

std::optional<RuleMatch> classify_weight(std::string_view name, const RuleContext& ctx) {
  for (const Rule& r : kRules) {
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
