// The model families qrepack converts, as data: one row per family, keyed by config.json's
// model_type. A row names how source tensor names map to the engine's names, which rule table
// classifies them (plan/rules.h), and which tensors a loader expects for a config (the coverage
// gate's list, for_each_model_weight). docs/families.md describes each row.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack {

/// How a family's source names become the engine's names.
enum class NameMap : std::uint8_t {
  kIdentity,
  /// MiniMax (the engine converter's "m3" mode): vision tensors dropped, `language_model.`
  /// stripped, `.block_sparse_moe.` -> `.mlp.` (its e_score_correction_bias to
  /// `.mlp.gate.e_score_correction_bias`), experts' w1 / w3 / w2 -> gate / up / down_proj.
  kMiniMax,
};

/// Which rule table of plan/rules.h classifies a family's names.
enum class RuleTable : std::uint8_t {
  kMla,     ///< MTP, DSA indexer, router, shared and routed experts, MLA attention
  kGqaMoe,  ///< MTP, router, routed experts, GQA attention
  kDense,   ///< GQA attention and a dense MLP
};

/// Which tensor list (for_each_model_weight) a family's config describes.
enum class TensorList : std::uint8_t { kMla, kGqa };

struct Family {
  FamilyId id;
  std::string_view name;   ///< stable id, e.g. "deepseek_v3"
  std::string_view title;  ///< in words
  std::span<const std::string_view> model_types;
  NameMap name_map;
  RuleTable rules;
  TensorList tensors;        ///< the coverage gate's list and check-load's
  std::string_view fixture;  ///< `qrepack fixture NAME` for its deterministic fixture
};

std::span<const Family> families();
const Family& family(FamilyId id);
/// The family whose model_types include `model_type` (MiniMax: any "minimax*"), or null.
const Family* family_for_model_type(std::string_view model_type);
/// "glm_moe_dsa, deepseek_v3, ..." and their model_types, for error messages.
std::string known_model_types();

/// A source tensor name mapped by `map`: the engine's name, or nullopt when the family drops
/// the tensor outright (MiniMax's vision tower and projector).
std::optional<std::string> map_source_name(NameMap map, std::string_view name);
/// The inverse of map_source_name for names it produces (fixtures write the source names).
std::string unmap_engine_name(NameMap map, std::string_view name);

/// Every tensor a checkpoint of config `c` holds, in state-dict order, in the engine's names,
/// with `main_pass` false for the DSA indexer and MTP layers. Dispatches on c.family.
void for_each_model_weight(const MoeConfig& c,
                           const std::function<void(const ModelWeight&)>& visit);
/// How many weights for_each_model_weight visits, or nullopt on overflow; computed.
std::optional<std::uint64_t> model_weight_count(const MoeConfig& c);

}  // namespace qrepack
