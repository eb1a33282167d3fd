// config.json (text_config when present) and dsv41_engram.json of DeepSeek V4.1 Flash for the
// forward pass: the keys c/deepseek_v41.c's cfg_load reads, with its defaults and the release's
// alternative spellings; the engram hash tables prepare_dsv41.py writes. Variants the pass does
// not implement are refused under forward.support, everything before a weight is read. DeepSeek
// V4 Flash's config.json: the keys c/deepseek_v4.c's coli_v4_config_parse requires (load_v4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack::model {

/// One engram table: the n-gram hash of a layer (dsv41_engram.json, one entry per layer id).
struct DsEngramTable {
  std::uint64_t layer = 0, rows = 0;
  std::vector<std::uint64_t> primes;       ///< [(max_ngram - 1) * heads], lookback-major
  std::vector<std::uint64_t> offsets;      ///< the same shape: each column's first row
  std::vector<std::uint64_t> multipliers;  ///< [max_ngram], int64 bit patterns
};

struct DsEngram {
  std::uint64_t max_ngram = 0, heads = 0, head_dim = 0, pad_id = 0;
  std::vector<std::uint64_t> token_map;  ///< [vocab] token -> compressed id
  std::vector<DsEngramTable> tables;
  std::uint64_t cols() const { return (max_ngram - 1) * heads; }
  /// The table of layer `l`, or nullptr.
  const DsEngramTable* table_of(std::uint64_t l) const;
};

struct DsV4Config {
  std::string model_type;
  std::uint64_t vocab = 0, dim = 0, layers = 0, heads = 0, head_dim = 0, rope_dim = 0;
  std::uint64_t q_lora = 0, o_lora = 0, o_groups = 1;
  std::uint64_t moe_inter = 0, experts = 0, top_k = 0;
  bool norm_topk_prob = true;
  float route_scale = 1, swiglu_limit = 0;
  double eps = 1e-6;
  std::uint64_t window = 128;
  std::vector<std::uint64_t> ratios;  ///< compress_ratios, one per layer
  std::vector<bool> kv_source, index_source;
  double compress_rope_theta = 40000, rope_theta = 10000, rope_factor = 1;
  std::uint64_t original_seq_len = 0, beta_fast = 32, beta_slow = 1;
  std::uint64_t index_heads = 0, index_dim = 0, index_topk = 0;
  std::int64_t candidate_source = -1;
  std::uint64_t candidate_topk_blocks = 0, candidate_block_size = 0;
  std::uint64_t hc = 1, hc_iters = 20;
  float hc_eps = 1e-6f;
  std::uint64_t max_positions = 4096;
  DsEngram engram;
  /// DeepSeek V4 Flash (deepseek_v4): run as c/deepseek_v4.c computes (deepseek_v4_runtime.h).
  bool runtime_v4 = false;
  std::uint64_t hash_layers = 0;  ///< num_hash_layers: tid2eid routing on layers [0, n)
};

/// Whether `model_type` (config.json's top level) is DeepSeek V4's or V4.1's.
bool is_deepseek_v4_model_type(const std::string& model_type);

/// Reads `dir`/config.json and, when the model has engram layers, `dir`/dsv41_engram.json.
Result<DsV4Config> load_deepseek_v4_config(const std::string& dir);

}  // namespace qrepack::model
