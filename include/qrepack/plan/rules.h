// The rule tables of the model families (checkpoint/family.h): for every logical weight name (in
// the engine's names), its disposition (quantize in a precision class, keep as stored, or drop)
// and the rule that decided it. Evaluated in order; the first matching rule wins. A name no rule
// matches is unclaimed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack {

enum class Disposition : std::uint8_t { kQuantize, kKeep, kDrop };

const char* disposition_name(Disposition d);

enum class Match : std::uint8_t { kExact, kSuffix, kContains, kMtpLayer };

struct Rule {
  std::string_view name;
  Match match;
  std::string_view pattern;
  Disposition disposition;
  WeightClass cls;
  std::string_view why;  ///< shown in --help and docs
};

/// The table of `config`'s family, in evaluation order; without a config (a checkpoint converted
/// by name rules alone) the MLA table, which also claims every GQA family's names.
std::span<const Rule> family_rules(const MoeConfig* config);

/// What one `convert` run converts: the main model, only the MTP head (--mtp: layers >=
/// num_hidden_layers, without their indexer), or only the DSA indexer of the main layers
/// (--indexer). Each pass writes its own shards into one output directory.
enum class ConvertPass : std::uint8_t { kMain, kMtp, kIndexer };

/// "main", "mtp", "indexer".
const char* convert_pass_name(ConvertPass p);

/// The pass that converts weight `name` of a model with `num_hidden_layers` main layers.
/// Weights of no pass (the MTP layer's indexer) count as the MTP pass's, which drops them.
ConvertPass weight_pass(std::string_view name, std::uint64_t num_hidden_layers);

struct RuleContext {
  std::span<const Rule> rules;
  std::uint64_t num_hidden_layers;  ///< layer index == this (or more) is the MTP head
  bool keep_mtp = false;            ///< MTP tensors are kept as stored instead of dropped
  bool keep_indexer = false;        ///< DSA indexer tensors are kept instead of dropped
  ConvertPass pass = ConvertPass::kMain;
};

struct RuleMatch {
  const Rule* rule;
  Disposition disposition;  ///< after the keep_* options
};

/// Whether the pass of `ctx` (--mtp or --indexer) converts `name`: the weight is of that pass
/// and its rules do not drop it (the MTP layer's own indexer is converted by no pass).
bool pass_converts(std::string_view name, const RuleContext& ctx);

/// The first rule matching `name`, or nullopt (unclaimed). In the MTP and indexer passes, a
/// name of another pass matches rule "other_pass" (dropped from this pass).
std::optional<RuleMatch> classify_weight(std::string_view name, const RuleContext& ctx);

}  // namespace qrepack
