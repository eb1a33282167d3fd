// colibri-olmoe: the OLMoE runtime's container (upstream convert_olmoe_merged.py;
// reference/colibri-engines.md §1.7). Each routed expert becomes one I8 merged_weight
// [gate | up | down flattened] quantized per row (scale = max(amax, 1e-12) / 127, codes
// rounded half to even, clamped to [-128, 127]) and its F32 .qs [gate | up | down row scales];
// every other tensor as stored; e_score_correction_bias and model.rotary_emb.* dropped.
// Files model-NNNNN.safetensors of at most 512 tensors: the dense tensors first (source shard
// order, names sorted within a shard), then the experts in (layer, expert) order, as upstream
// flushes them. Every name is checked against what olmoe.c loads.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/core/checked.h"
#include "qrepack/schemes/scheme.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kRule = "olmoe.config";
constexpr std::size_t kFlushEvery = 512;
constexpr std::array<std::string_view, 3> kProjections = {"gate_proj", "up_proj", "down_proj"};

struct Dims {
  std::uint64_t hidden, layers, heads, kv, experts, topk, inter, vocab;
};

Result<Dims> read_dims(const nlohmann::ordered_json& c, const std::string& dir) {
  Dims d{};
  QR_ASSIGN_OR_RETURN(hidden, config_dim(c, "hidden_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(layers, config_dim(c, "num_hidden_layers", dir, kRule));
  QR_ASSIGN_OR_RETURN(heads, config_dim(c, "num_attention_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(kv, config_dim(c, "num_key_value_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(experts, config_dim(c, "num_experts", dir, kRule));
  QR_ASSIGN_OR_RETURN(topk, config_dim(c, "num_experts_per_tok", dir, kRule));
  QR_ASSIGN_OR_RETURN(inter, config_dim(c, "intermediate_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(vocab, config_dim(c, "vocab_size", dir, kRule));
  d = {hidden, layers, heads, kv, experts, topk, inter, vocab};
  // The tensors the config describes are listed and checked one by one: bounded like every
  // config's weight count (kMaxModelWeights).
  if (layers * (9 + 3 * experts) > kMaxModelWeights) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("config.json describes {} layers x {} experts, over the cap of {} "
                             "weights",
                             layers, experts, kMaxModelWeights))
        .in_file((fs::path(dir) / "config.json").string())
        .with_rule("config.max_weights");
  }
  // olmoe.c uses q/k/v/o as [D, D] and q/k norms of D: it assumes as many KV heads as heads.
  if (kv != heads || topk > experts || hidden % heads != 0) {
    return Error(ErrorKind::kInvalidConfig,
                 fmt::format("olmoe.c needs num_key_value_heads == num_attention_heads ({} vs "
                             "{}), num_experts_per_tok <= num_experts ({} vs {}) and hidden_size "
                             "a multiple of the heads",
                             kv, heads, topk, experts))
        .in_file((fs::path(dir) / "config.json").string())
        .with_rule(kRule);
  }
  return d;
}

// The dense tensors olmoe.c reads, with the shapes of the config.
TensorContract dense_contract(const Dims& d) {
  TensorContract c;
  c.add("model.embed_tokens.weight", {d.vocab, d.hidden});
  c.add("lm_head.weight", {d.vocab, d.hidden});
  c.add("model.norm.weight", {d.hidden});
  const TensorContract::Shape square{d.hidden, d.hidden}, vec{d.hidden};
  c.per_layer(d.layers, "model.layers.{}.",
              {{"input_layernorm.weight", vec},
               {"post_attention_layernorm.weight", vec},
               {"self_attn.q_norm.weight", vec},
               {"self_attn.k_norm.weight", vec},
               {"self_attn.q_proj.weight", square},
               {"self_attn.k_proj.weight", square},
               {"self_attn.v_proj.weight", square},
               {"self_attn.o_proj.weight", square},
               {"mlp.gate.weight", {d.experts, d.hidden}}});
  return c;
}

// model.layers.L.mlp.experts.E.(gate|up|down)_proj.weight -> (L, E, projection index).
std::optional<std::array<std::uint64_t, 3>> expert_of(std::string_view n) {
  constexpr std::array<std::string_view, 3> kPatterns = {
      "model.layers.{}.mlp.experts.{}.gate_proj.weight",
      "model.layers.{}.mlp.experts.{}.up_proj.weight",
      "model.layers.{}.mlp.experts.{}.down_proj.weight"};
  for (std::uint64_t k = 0; k < kPatterns.size(); ++k) {
    if (const auto m = match_indices(kPatterns[k], n)) return std::array{(*m)[0], (*m)[1], k};
  }
  return std::nullopt;
}

bool dropped(std::string_view n) {
  return n.ends_with(".e_score_correction_bias") || n.starts_with("model.rotary_emb.");
}

}  // namespace

Result<ContainerPlan> plan_olmoe(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  if (o.scheme != "int8-row" || o.expert_bits || o.down_bits || o.down_group) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-olmoe writes int8-row experts only (olmoe.c loads "
                             "nothing else), not --to {}{}",
                             o.scheme, o.expert_bits || o.down_bits ? " with --bits" : ""))
        .with_rule("target.scheme");
  }
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-olmoe"));
  QR_ASSIGN_OR_RETURN(d, read_dims(config, dir));
  ContainerPlan plan;
  std::vector<std::string> problems;
  QR_ASSIGN_OR_RETURN(ix, start_plan(ck, plan, "olmoe", config, "olmoe", problems));
  TensorContract dense = dense_contract(d);
  // (layer, expert) -> its three projections.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::array<const LogicalWeight*, 3>> experts;
  for (const auto& [name, w] : ix.by_name) {
    if (dropped(name)) continue;
    if (const auto e = expert_of(name)) {
      const std::uint64_t rows = (*e)[2] == 2 ? d.hidden : d.inter;
      const std::uint64_t cols = (*e)[2] == 2 ? d.inter : d.hidden;
      if ((*e)[0] >= d.layers || (*e)[1] >= d.experts) {
        problems.push_back(fmt::format("{}: layer or expert out of the config's range", name));
      } else if (std::vector<std::uint64_t>(w->shape) != std::vector<std::uint64_t>{rows, cols}) {
        problems.push_back(fmt::format("{}: shape [{}] is not [{}, {}]", name,
                                       fmt::join(w->shape, ", "), rows, cols));
      } else {
        experts[{(*e)[0], (*e)[1]}][(*e)[2]] = w;
      }
      continue;
    }
    dense.check(name, std::vector<std::uint64_t>(w->shape), problems);
  }
  dense.report_missing(problems);
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    for (std::uint64_t e = 0; e < d.experts; ++e) {
      const auto it = experts.find({l, e});
      for (std::size_t k = 0; k < 3; ++k) {
        if (it == experts.end() || !it->second[k]) {
          problems.push_back(fmt::format("missing model.layers.{}.mlp.experts.{}.{}.weight", l, e,
                                         kProjections[k]));
        }
      }
    }
  }
  if (!problems.empty()) {
    std::sort(problems.begin(), problems.end());
    return unknown_tensors_error(dir, "colibri-olmoe (olmoe.c)", problems);
  }

  ContainerBuilder b(plan);
  std::size_t in_file = kFlushEvery;  // starts a file before the first tensor
  const auto next_file = [&](std::size_t adding) {
    if (in_file + adding > kFlushEvery || in_file >= kFlushEvery) {
      b.file(fmt::format("model-{:05d}.safetensors", plan.files.size()));
      in_file = 0;
    }
    in_file += adding;
  };
  // Dense tensors in source shard order (shards by file name), names sorted within a shard.
  std::vector<std::size_t> shard_order(ck.shards().size());
  std::iota(shard_order.begin(), shard_order.end(), 0);
  std::sort(shard_order.begin(), shard_order.end(), [&](std::size_t a, std::size_t c) {
    return fs::path(ck.shards()[a].path()).filename() < fs::path(ck.shards()[c].path()).filename();
  });
  for (const std::size_t s : shard_order) {
    std::vector<std::string_view> names;
    for (const TensorEntry& t : ck.shards()[s].tensors()) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    for (std::string_view n : names) {
      if (dropped(n)) {
        b.source(n, "drop",
                 n.starts_with("model.rotary_emb.") ? "olmoe.rotary_buffer"
                                                    : "olmoe.unused_router_bias");
        continue;
      }
      if (!dense.seen(n)) continue;
      const LogicalWeight& w = *ix.by_name.at(n);
      next_file(1);
      if (w.encoding == SourceEncoding::kFloat) {
        b.copy(w.data, std::string(n));
        b.count("dense kept as stored");
        b.source(n, "keep", "olmoe.dense_as_stored");
      } else {
        b.cast(w, Dtype::kBF16, std::string(n));  // olmoe.c reads float dense tensors only
        b.count("dense decoded to bf16");
        b.source(w.source_name(), "convert", "olmoe.dense_to_bf16");
      }
    }
  }
  in_file = kFlushEvery;  // the experts start a file of their own, as upstream flushes
  QuantRule rule;
  rule.bits = 8;
  for (const auto& [key, proj] : experts) {
    next_file(2);
    const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", key.first, key.second);
    b.quant({{proj[0], rule}, {proj[1], rule}, {proj[2], rule}}, p + "merged_weight", Dtype::kI8,
            {3 * d.inter * d.hidden}, p + "qs", {2 * d.inter + d.hidden});
    b.count("experts merged int8-row");
    for (const LogicalWeight* w : proj) b.source(w->source_name(), "merge", "olmoe.expert_int8");
  }
  b.sort_files_for_alignment();
  copy_side_files(plan, dir,
                  {"config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt"});
  add_generation_config(plan, dir, config);
  return plan;
}

}  // namespace qrepack
