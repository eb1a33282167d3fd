// What the two Inkling targets share: the text_config dims that fix every tensor's shape
// (the keys and layer-type rules c/inkling.c's load_cfg reads), and the resident tensors of
// the colibri container in HF names with their shapes (the routed experts aside).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

/// inkling.c's Cfg, read strictly: every key a shape depends on is required (no 975B
/// defaults), layer_types / mlp_layer_types must list every layer.
struct InklingDims {
  std::uint64_t hidden = 0, layers = 0, vocab = 0;
  std::uint64_t heads = 0, kv = 0, head_dim = 0;              // global layers
  std::uint64_t swa_heads = 0, swa_kv = 0, swa_head_dim = 0;  // sliding layers
  std::uint64_t window = 0, d_rel = 0, rel_extent = 0, conv_k = 0;
  std::uint64_t experts = 0, shared = 0, topk = 0, moe_inter = 0, dense_inter = 0;
  std::vector<bool> sliding, sparse;  ///< per layer

  std::uint64_t heads_of(std::uint64_t l) const { return sliding[l] ? swa_heads : heads; }
  std::uint64_t kv_of(std::uint64_t l) const { return sliding[l] ? swa_kv : kv; }
  std::uint64_t head_dim_of(std::uint64_t l) const { return sliding[l] ? swa_head_dim : head_dim; }
  std::uint64_t extent_of(std::uint64_t l) const { return sliding[l] ? window : rel_extent; }
  bool any_sparse() const;
};

/// The text fields: config.json's text_config (the release form), else the file itself.
const nlohmann::ordered_json& inkling_text_config(const nlohmann::ordered_json& config);

/// Reads the dims of `dir`/config.json; a missing or bad key is one error naming it and the
/// rule inkling.config (layer lists: inkling.layer_types).
Result<InklingDims> read_inkling_dims(const nlohmann::ordered_json& config, const std::string& dir);

/// A resident tensor of the container: its shape and whether inkling.c can do without it.
struct InklingResident {
  std::vector<std::uint64_t> shape;
  bool optional = false;
};

/// Every resident tensor of the colibri-inkling container (HF names) the config implies:
/// globals, per layer the attention set, the dense MLP or the router + shared experts.
std::map<std::string, InklingResident> inkling_residents(const InklingDims& d);

}  // namespace qrepack
