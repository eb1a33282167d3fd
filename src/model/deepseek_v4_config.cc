#include "model/deepseek_v4_config.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "model/config_keys.h"
#include "model/deepseek_v4_engram.h"

namespace qrepack::model {
namespace {

using Json = nlohmann::json;

// Caps on what the pass allocates from these numbers (c/deepseek_v41.c's V41_MAX_* and the
// largest released dimensions, with room).
constexpr std::uint64_t kMaxLayers = 64, kMaxHc = 16;
constexpr std::uint64_t kMaxDim = 1 << 16, kMaxVocab = 1 << 22;

// The first of `keys` present, as a non-negative integer; `fallback` when none is.
Result<std::uint64_t> uint_key(const Json& j, std::initializer_list<const char*> keys,
                               std::uint64_t fallback) {
  for (const char* k : keys) {
    if (!present(j, k)) continue;
    if (!j[k].is_number_unsigned()) {
      return forward_config_error(fmt::format("\"{}\" must be a non-negative integer, got {}", k,
                                              j[k].dump().substr(0, 32)));
    }
    return j[k].get<std::uint64_t>();
  }
  return fallback;
}

Result<double> num_key(const Json& j, std::initializer_list<const char*> keys, double fallback) {
  for (const char* k : keys) {
    if (!present(j, k)) continue;
    if (!j[k].is_number() || !std::isfinite(j[k].get<double>())) {
      return forward_config_error(
          fmt::format("\"{}\" must be a finite number, got {}", k, j[k].dump().substr(0, 32)));
    }
    return j[k].get<double>();
  }
  return fallback;
}

// An array of non-negative integers (at most `cap`), empty when absent.
Result<std::vector<std::uint64_t>> uint_list(const Json& j, std::initializer_list<const char*> keys,
                                             std::uint64_t cap) {
  for (const char* k : keys) {
    if (!present(j, k)) continue;
    const Json& a = j[k];
    if (!a.is_array() || a.size() > cap) {
      return forward_config_error(
          fmt::format("\"{}\" must be an array of at most {} integers", k, cap));
    }
    std::vector<std::uint64_t> out;
    for (const Json& v : a) {
      if (!v.is_number_unsigned()) {
        return forward_config_error(
            fmt::format("\"{}\" holds {}, not a non-negative integer", k, v.dump().substr(0, 32)));
      }
      out.push_back(v.get<std::uint64_t>());
    }
    return out;
  }
  return std::vector<std::uint64_t>{};
}

Status read_dims(const Json& t, DsV4Config& c) {
  struct Key {
    std::uint64_t* out;
    std::initializer_list<const char*> names;
    std::uint64_t fallback;
  };
  const Key keys[] = {
      {&c.vocab, {"vocab_size"}, 0},
      {&c.dim, {"dim", "hidden_size"}, 0},
      {&c.layers, {"n_layers", "num_hidden_layers"}, 0},
      {&c.heads, {"n_heads", "num_attention_heads"}, 0},
      {&c.head_dim, {"head_dim"}, 0},
      {&c.rope_dim, {"rope_head_dim", "qk_rope_head_dim"}, 0},
      {&c.q_lora, {"q_lora_rank"}, 0},
      {&c.o_lora, {"o_lora_rank"}, 0},
      {&c.o_groups, {"o_groups"}, 1},
      {&c.moe_inter, {"moe_inter_dim", "moe_intermediate_size"}, 0},
      {&c.experts, {"n_routed_experts"}, 0},
      {&c.top_k, {"n_activated_experts", "num_experts_per_tok"}, 0},
      {&c.window, {"window_size", "sliding_window"}, 128},
      {&c.index_heads, {"index_n_heads"}, 0},
      {&c.index_dim, {"index_head_dim"}, 0},
      {&c.index_topk, {"index_topk"}, 0},
      {&c.candidate_topk_blocks, {"candidate_topk_blocks"}, 0},
      {&c.candidate_block_size, {"candidate_block_size"}, 0},
      {&c.hc, {"hc_mult"}, 1},
      {&c.hc_iters, {"hc_sinkhorn_iters"}, 20},
      {&c.max_positions, {"max_seq_len", "max_position_embeddings"}, 4096},
      {&c.original_seq_len, {"original_seq_len"}, 0},
      {&c.beta_fast, {"beta_fast"}, 32},
      {&c.beta_slow, {"beta_slow"}, 1},
  };
  for (const Key& k : keys) {
    QR_ASSIGN_OR_RETURN(v, uint_key(t, k.names, k.fallback));
    *k.out = v;
  }
  return ok_status();
}

Status read_numbers(const Json& t, DsV4Config& c) {
  QR_ASSIGN_OR_RETURN(scale, num_key(t, {"route_scale", "routed_scaling_factor"}, 1.0));
  QR_ASSIGN_OR_RETURN(limit, num_key(t, {"swiglu_limit"}, 0.0));
  QR_ASSIGN_OR_RETURN(eps, num_key(t, {"norm_eps", "rms_norm_eps"}, 1e-6));
  QR_ASSIGN_OR_RETURN(hc_eps, num_key(t, {"hc_eps"}, 1e-6));
  QR_ASSIGN_OR_RETURN(ctheta, num_key(t, {"compress_rope_theta"}, 40000.0));
  QR_ASSIGN_OR_RETURN(theta, num_key(t, {"rope_theta"}, 10000.0));
  QR_ASSIGN_OR_RETURN(factor, num_key(t, {"rope_factor"}, 1.0));
  // make_dsv41_tiny.py writes norm_topk_prob as a JSON boolean, a release may as a number.
  const bool flag = present(t, "norm_topk_prob") && t["norm_topk_prob"].is_boolean();
  QR_ASSIGN_OR_RETURN(norm_topk, flag ? Result<double>(t["norm_topk_prob"].get<bool>() ? 1.0 : 0.0)
                                      : num_key(t, {"norm_topk_prob"}, 1.0));
  c.route_scale = static_cast<float>(scale);
  c.swiglu_limit = static_cast<float>(limit);
  c.eps = static_cast<float>(eps);  // the runtime holds it as a float
  c.hc_eps = static_cast<float>(hc_eps);
  c.compress_rope_theta = static_cast<float>(ctheta);
  c.rope_theta = static_cast<float>(theta);
  c.rope_factor = static_cast<float>(factor);
  c.norm_topk_prob = norm_topk != 0;
  if (present(t, "rope_scaling") && t["rope_scaling"].is_object()) {
    const Json& s = t["rope_scaling"];
    QR_ASSIGN_OR_RETURN(f, num_key(s, {"factor"}, c.rope_factor));
    c.rope_factor = static_cast<float>(f);
    QR_ASSIGN_OR_RETURN(bf, uint_key(s, {"beta_fast"}, c.beta_fast));
    QR_ASSIGN_OR_RETURN(bs, uint_key(s, {"beta_slow"}, c.beta_slow));
    QR_ASSIGN_OR_RETURN(o, uint_key(s, {"original_max_position_embeddings"}, c.original_seq_len));
    c.beta_fast = bf;
    c.beta_slow = bs;
    c.original_seq_len = o;
  }
  if (limit < 0 || eps < 0 || hc_eps < 0 || ctheta <= 0 || theta <= 0 || factor <= 0) {
    return forward_config_error(
        "swiglu_limit, norm_eps and hc_eps must not be negative; the rope thetas and factor "
        "must be positive");
  }
  return ok_status();
}

// What c/deepseek_v41.c does not compute, or this pass does not implement, refused by name.
Status check_variants(const Json& t) {
  for (const char* k : {"score_func", "scoring_func"}) {
    if (present(t, k) && t[k] != Json("sqrtsoftplus")) {
      return forward_unsupported(fmt::format("{} {}: only sqrtsoftplus routing is implemented", k,
                                             t[k].dump().substr(0, 32)));
    }
  }
  if (present(t, "gate_temp") && t["gate_temp"] != Json(1.0) && t["gate_temp"] != Json(1)) {
    return forward_unsupported("gate_temp other than 1 is not implemented (dsv41_ref.py has none)");
  }
  if (present(t, "n_shared_experts") && t["n_shared_experts"] != Json(1)) {
    return forward_unsupported(
        "n_shared_experts other than 1: the pass runs exactly one shared expert");
  }
  if (present(t, "num_hash_layers") && t["num_hash_layers"] != Json(0)) {
    return forward_unsupported(
        "num_hash_layers: hash routing (tid2eid) is DeepSeek V4's, not V4.1's");
  }
  return ok_status();
}

Status check_dims(const DsV4Config& c) {
  const std::uint64_t dims[] = {c.vocab,    c.dim,       c.heads,   c.head_dim, c.q_lora, c.o_lora,
                                c.o_groups, c.moe_inter, c.experts, c.top_k,    c.window, c.hc};
  for (std::uint64_t d : dims) {
    if (d == 0) {
      return forward_config_error(
          "vocab_size, dim, n_heads, head_dim, q_lora_rank, o_lora_rank, o_groups, "
          "moe_inter_dim, n_routed_experts, n_activated_experts, window_size and hc_mult must "
          "all be positive");
    }
  }
  if (c.layers == 0 || c.layers > kMaxLayers || c.dim > kMaxDim || c.vocab > kMaxVocab ||
      c.hc > kMaxHc || c.heads * c.head_dim > kMaxDim || c.q_lora > kMaxDim ||
      c.moe_inter > kMaxDim || c.experts > 4096 || c.top_k > c.experts) {
    return forward_config_error(
        fmt::format("dimensions out of range: n_layers {} (1..{}), dim {}, vocab {}, hc_mult {}, "
                    "n_activated_experts {} of {}",
                    c.layers, kMaxLayers, c.dim, c.vocab, c.hc, c.top_k, c.experts));
  }
  if (c.rope_dim % 2 || c.rope_dim > c.head_dim || (c.heads * c.head_dim) % c.o_groups) {
    return forward_config_error(fmt::format(
        "rope_head_dim {} must be even and at most head_dim {}; n_heads x head_dim must be a "
        "multiple of o_groups {}",
        c.rope_dim, c.head_dim, c.o_groups));
  }
  if (c.ratios.size() < c.layers) {
    return forward_config_error(
        fmt::format("compress_ratios has {} entries for {} layers", c.ratios.size(), c.layers));
  }
  return ok_status();
}

// Which layer's caches a compressing layer reads: the nearest kv / index source at or before
// it, which must compress at the same ratio (the cache widths would not agree otherwise).
Status check_sources(const DsV4Config& c) {
  if (c.candidate_source >= 0 &&
      (c.candidate_source >= static_cast<std::int64_t>(c.layers) ||
       c.ratios[c.candidate_source] == 0 || !c.index_source[c.candidate_source] ||
       c.candidate_block_size == 0 || c.candidate_topk_blocks == 0)) {
    return forward_unsupported(
        "candidate_source_layer must name a compressing index source layer, with positive "
        "candidate_block_size and candidate_topk_blocks");
  }
  std::int64_t kv = -1, ix = -1;
  bool any_ratio = false;
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    if (c.kv_source[l] && !c.index_source[l]) {
      return forward_unsupported(fmt::format(
          "layer {} is a kv source but not an index source: the pass publishes index keys from "
          "layers that are both (as the release's kv_source_layers are)",
          l));
    }
    if (c.kv_source[l]) kv = static_cast<std::int64_t>(l);
    if (c.index_source[l]) ix = static_cast<std::int64_t>(l);
    const std::uint64_t r = c.ratios[l];
    if (r == 0) continue;
    any_ratio = true;
    if (r > c.max_positions)
      return forward_config_error(fmt::format("compress ratio {} too large", r));
    if (kv < 0 || ix < 0 || c.ratios[kv] != r || c.ratios[ix] != r) {
      return forward_unsupported(
          fmt::format("layer {} compresses 1:{} but no kv source and index source at or before it "
                      "compresses at that ratio (kv_source_layers / index_source_layers)",
                      l, r));
    }
    if (c.candidate_source >= 0 && c.candidate_source < static_cast<std::int64_t>(l) &&
        c.index_source[l] && c.ratios[c.candidate_source] != r) {
      return forward_unsupported(fmt::format(
          "layer {} filters with candidate source layer {}'s blocks at another compress ratio", l,
          c.candidate_source));
    }
  }
  if (any_ratio && (c.index_heads == 0 || c.index_dim < c.rope_dim || c.index_topk == 0 ||
                    c.index_dim > kMaxDim || c.index_heads > 1024)) {
    return forward_config_error("index_n_heads, index_head_dim (>= rope_head_dim) and index_topk");
  }
  return ok_status();
}

Status read_sources(const Json& t, DsV4Config& c) {
  QR_ASSIGN_OR_RETURN(ratios, uint_list(t, {"compress_ratios"}, 4 * kMaxLayers));
  QR_ASSIGN_OR_RETURN(kv, uint_list(t, {"kv_source_layers", "kv_source_layer_ids"}, kMaxLayers));
  QR_ASSIGN_OR_RETURN(ix,
                      uint_list(t, {"index_source_layers", "index_source_layer_ids"}, kMaxLayers));
  c.ratios = std::move(ratios);
  c.kv_source.assign(c.layers, false);
  c.index_source.assign(c.layers, false);
  for (std::uint64_t l : kv) {
    if (l < c.layers) c.kv_source[l] = true;
  }
  for (std::uint64_t l : ix) {
    if (l < c.layers) c.index_source[l] = true;
  }
  for (const char* k : {"candidate_source_layer", "candidate_source_layer_id"}) {
    if (!present(t, k)) continue;
    if (!t[k].is_number_integer())
      return forward_config_error(fmt::format("\"{}\" is not an integer", k));
    c.candidate_source = t[k].get<std::int64_t>();
    break;
  }
  return ok_status();
}

// DeepSeek V4 Flash: c/deepseek_v4.c's coli_v4_config_parse keys; every compressing layer
// has its own compressor, ratio-4 layers an indexer.
Result<DsV4Config> load_v4(const Json& t, DsV4Config c) {
  c.runtime_v4 = true;
  for (const auto& [k, want] :
       {std::pair{"scoring_func", "sqrtsoftplus"}, std::pair{"expert_dtype", "fp4"},
        std::pair{"topk_method", "noaux_tc"}}) {
    if (!present(t, k) || t[k] != Json(want)) {
      return forward_unsupported(
          fmt::format("DeepSeek V4: {} must be \"{}\" (c/deepseek_v4.c)", k, want));
    }
  }
  if (!present(t, "n_shared_experts") || t["n_shared_experts"] != Json(1)) {
    return forward_unsupported(
        "n_shared_experts other than 1: the pass runs exactly one shared expert");
  }
  QR_TRY(read_dims(t, c));
  QR_TRY(read_numbers(t, c));
  QR_ASSIGN_OR_RETURN(ratios, uint_list(t, {"compress_ratios"}, 4 * kMaxLayers));
  QR_ASSIGN_OR_RETURN(hash, uint_key(t, {"num_hash_layers"}, 0));
  c.ratios = std::move(ratios);
  c.hash_layers = hash;
  c.kv_source.assign(c.layers, false);
  c.index_source.assign(c.layers, false);
  QR_TRY(check_dims(c));
  bool indexed = false;
  for (std::uint64_t l = 0; l < c.layers; ++l) indexed = indexed || c.ratios[l] == 4;
  const bool pow2 = c.index_dim > 0 && (c.index_dim & (c.index_dim - 1)) == 0;
  if (c.hash_layers > c.layers || c.heads % c.o_groups ||
      (indexed && (c.index_heads == 0 || c.index_heads > 1024 || !pow2 ||
                   c.index_dim < c.rope_dim || c.index_dim > kMaxDim || c.index_topk == 0))) {
    return forward_config_error(
        "DeepSeek V4: num_hash_layers at most n_layers, n_heads a multiple of o_groups, and on "
        "1:4 layers index_n_heads, index_topk positive and index_head_dim a power of two at "
        "least qk_rope_head_dim");
  }
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    if (c.ratios[l] > c.max_positions) {
      return forward_config_error(fmt::format("compress ratio {} too large", c.ratios[l]));
    }
  }
  return c;
}

}  // namespace

const DsEngramTable* DsEngram::table_of(std::uint64_t l) const {
  for (const DsEngramTable& t : tables) {
    if (t.layer == l) return &t;
  }
  return nullptr;
}

bool is_deepseek_v4_model_type(const std::string& model_type) {
  return model_type == "deepseek_v4" || model_type == "deepseek_v41" ||
         model_type == "deepseek_v41_text";
}

Result<DsV4Config> load_deepseek_v4_config(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(f, read_model_config(dir));
  const std::string& p = f.path;
  const Json& t = f.text();
  auto in_file = [&](Error e) { return std::move(e.in_file(p)); };
  auto in_file_result = [&](Result<DsV4Config> r, const std::string& path) -> Result<DsV4Config> {
    if (!r.ok()) return std::move(r.error().in_file(path));
    return r;
  };
  DsV4Config c;
  c.model_type = f.model_type;
  if (c.model_type == "deepseek_v4") return in_file_result(load_v4(t, std::move(c)), p);
  if (Status s = check_variants(t); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_dims(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_numbers(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_sources(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = check_dims(c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = check_sources(c); !s.ok()) return in_file(std::move(s.error()));
  auto ids = uint_list(t, {"engram_layer_ids"}, kMaxLayers);
  if (!ids.ok()) return in_file(std::move(ids.error()));
  if (!ids->empty()) {
    QR_ASSIGN_OR_RETURN(e, load_dsv41_engram(dir, *ids, c.vocab, c.layers));
    c.engram = std::move(e);
  }
  return c;
}

}  // namespace qrepack::model
