// check-load for DeepSeek V4.1 Flash as released (model_type deepseek_v41): what
// c/deepseek_v41.c's model_load, spec_load and engram_load_sidecar read (upstream
// JustVugg/colibri c/deepseek_v41.c @ 026c0c48; the release layout of make_dsv41_tiny.py and
// dsv41_ref.py, reference/colibri-engines.md §1.15). Keys come from text_config (else the top
// level), in the loader's spellings with the release's aliases. Dense projections are FP8 e4m3
// with one UE8M0 `.scale` per 32x32 tile; routed experts FP4 (I8 [O, I/2] + UE8M0 `.scale`
// [O, I/32]); the engram tables FP8 + UE8M0 per row group of 32, described by
// dsv41_engram.json, which prepare_dsv41.py writes beside config.json once per checkpoint.
// The vision tower is not checked.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/checkpoint/glm_moe.h"
#include "targets/releases/release_check.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kTile = 32;

struct V41 {
  std::uint64_t vocab, dim, layers, heads, head_dim, q_lora, o_lora, o_groups;
  std::uint64_t inter, experts, hc, index_heads, index_dim;
  std::vector<std::uint64_t> ratios, kv_source, index_source;
};

bool read_config(const Json& t, TargetLoadReport& r, V41& c) {
  const std::size_t before = r.unloadable.size();
  c.vocab = release_key(t, {"vocab_size"}, r);
  c.dim = release_key(t, {"dim", "hidden_size"}, r);
  c.layers = release_key(t, {"n_layers", "num_hidden_layers"}, r);
  c.heads = release_key(t, {"n_heads", "num_attention_heads"}, r);
  c.head_dim = release_key(t, {"head_dim"}, r);
  release_key(t, {"rope_head_dim", "qk_rope_head_dim"}, r);
  c.q_lora = release_key(t, {"q_lora_rank"}, r);
  c.o_lora = release_key(t, {"o_lora_rank"}, r);
  c.o_groups = t.contains("o_groups") ? release_key(t, {"o_groups"}, r) : 1;
  c.inter = release_key(t, {"moe_inter_dim", "moe_intermediate_size"}, r);
  c.experts = release_key(t, {"n_routed_experts"}, r);
  release_key(t, {"n_activated_experts", "num_experts_per_tok"}, r);
  c.index_heads = release_key(t, {"index_n_heads"}, r);
  c.index_dim = release_key(t, {"index_head_dim"}, r);
  release_key(t, {"index_topk"}, r);
  c.hc = t.contains("hc_mult") ? release_key(t, {"hc_mult"}, r) : 1;
  if (r.unloadable.size() != before) return false;
  if (c.layers == 0 || c.layers > 64 || c.o_groups == 0 || c.dim % kTile || c.inter % kTile ||
      (c.heads * c.head_dim) % c.o_groups) {
    r.unloadable.push_back(
        "config.json: dims deepseek_v41.c refuses (1..64 layers; dim and moe_inter_dim "
        "multiples of 32; heads x head_dim a multiple of o_groups)");
    return false;
  }
  // The loader takes the first n_layers entries of compress_ratios and refuses fewer.
  c.ratios = release_int_list(t, "compress_ratios", 0, r);
  if (!c.ratios.empty() && c.ratios.size() < c.layers) {
    r.unloadable.push_back(fmt::format("config.json: compress_ratios has {} entries for {} layers",
                                       c.ratios.size(), c.layers));
  }
  const char* kv = t.contains("kv_source_layers") ? "kv_source_layers" : "kv_source_layer_ids";
  const char* ix =
      t.contains("index_source_layers") ? "index_source_layers" : "index_source_layer_ids";
  c.kv_source = release_int_list(t, kv, 0, r);
  c.index_source = release_int_list(t, ix, 0, r);
  return r.unloadable.size() == before;
}

bool listed(const std::vector<std::uint64_t>& v, std::uint64_t i) {
  return std::find(v.begin(), v.end(), i) != v.end();
}

void fp8(Loader& l, const std::string& stem, std::uint64_t o, std::uint64_t i) {
  release_fp8(l, stem + ".weight", stem + ".scale", o, i, kTile, {Dtype::kF8E8M0, Dtype::kU8});
}

// What a backbone layer and a DSpark stage share (model_load / spec_load).
void block(Loader& l, const V41& c, const std::string& p, std::uint64_t experts) {
  const std::uint64_t mix = (2 + c.hc) * c.hc, hs = c.heads * c.head_dim;
  fp8(l, p + "attn.wq_a", c.q_lora, c.dim);
  fp8(l, p + "attn.wq_b", hs, c.q_lora);
  fp8(l, p + "attn.wkv", c.head_dim, c.dim);
  fp8(l, p + "attn.wo_a", c.o_groups * c.o_lora, hs / c.o_groups);
  fp8(l, p + "attn.wo_b", c.dim, c.o_groups * c.o_lora);
  release_floats(l, p + "attn.q_norm.weight", c.q_lora, true);
  release_floats(l, p + "attn.kv_norm.weight", c.head_dim, true);
  release_floats(l, p + "attn.attn_sink", c.heads, true);
  release_floats(l, p + "attn_norm.weight", c.dim, true);
  release_floats(l, p + "ffn_norm.weight", c.dim, true);
  for (const char* s : {"attn", "ffn"}) {
    release_floats(l, fmt::format("{}hc_{}_fn", p, s), mix * c.hc * c.dim, true);
    release_floats(l, fmt::format("{}hc_{}_base", p, s), mix, true);
    release_floats(l, fmt::format("{}hc_{}_scale", p, s), 3, true);
  }
  release_tensor(l, p + "ffn.gate.weight", {Dtype::kBF16}, {experts, c.dim});
  release_floats(l, p + "ffn.gate.bias", experts, true);
  fp8(l, p + "ffn.shared_experts.w1", c.inter, c.dim);
  fp8(l, p + "ffn.shared_experts.w3", c.inter, c.dim);
  fp8(l, p + "ffn.shared_experts.w2", c.dim, c.inter);
  for (std::uint64_t e = 0; e < experts; ++e) {
    const std::string x = fmt::format("{}ffn.experts.{}.", p, e);
    release_fp4(l, x + "w1.weight", x + "w1.scale", c.inter, c.dim);
    release_fp4(l, x + "w3.weight", x + "w3.scale", c.inter, c.dim);
    release_fp4(l, x + "w2.weight", x + "w2.scale", c.dim, c.inter);
  }
}

void attention_extras(Loader& l, const V41& c, std::uint64_t i) {
  const std::string p = fmt::format("layers.{}.attn.", i);
  if (listed(c.kv_source, i)) {
    release_tensor(l, p + "compressor.wkv.weight", {Dtype::kBF16}, {c.head_dim, c.dim});
    release_floats(l, p + "compressor.norm.weight", c.head_dim, true);
    if (c.ratios[i] > 1) {
      release_tensor(l, p + "compressor.wgate.weight", {Dtype::kBF16}, {c.head_dim, c.dim});
    }
    release_tensor(l, p + "indexer.wk.weight", {Dtype::kBF16}, {c.index_dim, c.head_dim});
    release_floats(l, p + "indexer.k_norm.weight", c.index_dim, true);
  }
  if (listed(c.index_source, i)) {
    fp8(l, p + "indexer.wq_b", c.index_heads * c.index_dim, c.q_lora);
    release_tensor(l, p + "indexer.weights_proj.weight", {Dtype::kBF16}, {c.index_heads, c.dim});
  }
}

// engram_load_sidecar: a missing sidecar turns the engram off, which the release's config
// (engram_layer_ids) does not allow; multipliers must be decimal strings.
Json read_sidecar(const ReleaseInput& in, const Json& t, TargetLoadReport& r) {
  const bool wanted = t.contains("engram_layer_ids") && t["engram_layer_ids"].is_array() &&
                      !t["engram_layer_ids"].empty();
  const std::string p = (std::filesystem::path(in.dir) / "dsv41_engram.json").string();
  if (path_kind(p) == PathKind::kMissing) {
    if (wanted) {
      r.unloadable.push_back(fmt::format(
          "dsv41_engram.json: missing (the engram tables of engram_layer_ids need it); make it "
          "once with: python3 c/tools/prepare_dsv41.py --model {}",
          in.dir));
    }
    return Json();
  }
  auto j = read_json_file(p, ErrorKind::kInvalidConfig, std::uint64_t{32} << 20);
  if (!j.ok() || !j->is_object()) {
    r.unloadable.push_back("dsv41_engram.json: not a JSON object");
    return Json();
  }
  for (const char* k : {"layer_ids", "primes", "offsets", "multipliers", "token_map"}) {
    if (!j->contains(k) || !(*j)[k].is_array()) {
      r.unloadable.push_back(fmt::format("dsv41_engram.json: missing list \"{}\"", k));
    }
  }
  for (const auto& row : j->value("multipliers", Json::array())) {
    for (const auto& m : row.is_array() ? row : Json::array()) {
      if (!m.is_string()) {
        r.unloadable.push_back(
            "dsv41_engram.json: multipliers must be decimal strings (regenerate it with "
            "prepare_dsv41.py)");
        return Json();
      }
    }
  }
  return *std::move(j);
}

void engram(Loader& l, const V41& c, const Json& side) {
  auto& r = l.report();
  const std::uint64_t ngram = release_key(side, {"max_ngram_size"}, r);
  const std::uint64_t heads = release_key(side, {"n_heads"}, r);
  const std::uint64_t hd = release_key(side, {"head_dim"}, r);
  const auto ids = release_int_list(side, "layer_ids", 0, r);
  if (ngram < 2 || heads == 0 || hd == 0 || hd % kTile) {
    r.unloadable.push_back("dsv41_engram.json: max_ngram_size, n_heads or head_dim out of range");
    return;
  }
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] >= c.layers) {
      r.unloadable.push_back(fmt::format("dsv41_engram.json: table {} names layer {}", k, ids[k]));
      continue;
    }
    const std::string p = fmt::format("layers.{}.engram.", ids[k]);
    const auto table = l.ck().find(p + "embed.weight");
    const std::uint64_t rows =
        table && !table->entry->shape.empty() ? table->entry->shape[0] : std::uint64_t{0};
    release_tensor(l, p + "embed.weight", {Dtype::kF8E4M3}, {rows, hd});
    release_tensor(l, p + "embed.scale", {Dtype::kF8E8M0, Dtype::kU8}, {rows, hd / kTile});
    fp8(l, p + "wkv", c.dim * (c.hc + 1), (ngram - 1) * heads * hd);
    release_floats(l, p + "q_weight", c.hc * c.dim, true);
    release_floats(l, p + "k_weight", c.hc * c.dim, true);
  }
}

// spec_load: DSpark stages counted as the loader counts them (mtp.N.attn.wq_a.weight, from 0).
void dspark(Loader& l, const V41& c, const Json& t) {
  auto& r = l.report();
  if (!t.contains("dspark_block_size") || !t.contains("dspark_target_layer_ids")) return;
  const auto targets = release_int_list(t, "dspark_target_layer_ids", 0, r);
  std::uint64_t stages = 0;
  while (stages < 16 && l.ck().find(fmt::format("mtp.{}.attn.wq_a.weight", stages))) ++stages;
  if (targets.empty() || stages == 0) return;
  const std::uint64_t rank = release_key(t, {"dspark_markov_rank"}, r);
  const std::uint64_t routed = t.contains("dspark_n_routed_experts")
                                   ? release_key(t, {"dspark_n_routed_experts"}, r)
                                   : c.experts;
  for (std::uint64_t s = 0; s < stages; ++s) block(l, c, fmt::format("mtp.{}.", s), routed);
  fp8(l, "mtp.0.main_proj", c.dim, c.dim * targets.size());
  release_floats(l, "mtp.0.main_norm.weight", c.dim, true);
  const std::string last = fmt::format("mtp.{}.", stages - 1);
  release_floats(l, last + "norm.weight", c.dim, true);
  release_tensor(l, last + "markov_head.embed.weight", {Dtype::kBF16}, {c.vocab, rank});
  release_tensor(l, last + "markov_head.head.weight", {Dtype::kBF16}, {c.vocab, rank});
  release_tensor(l, last + "confidence_head.proj.weight", {Dtype::kBF16}, {1, c.dim + rank});
}

}  // namespace

Status check_deepseek_v41_release(const ReleaseInput& in, Loader& l) {
  auto& r = l.report();
  const Json& t = release_text_config(in.config);
  V41 c{};
  const Json side = read_sidecar(in, t, r);
  if (!read_config(t, r, c)) return ok_status();
  if (c.layers * (c.experts * 6 + 60) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  release_tensor(l, "embed.weight", {Dtype::kBF16}, {c.vocab, c.dim});
  release_tensor(l, "head.weight", {Dtype::kBF16}, {c.vocab, c.dim});
  release_floats(l, "norm.weight", c.dim, true);
  for (std::uint64_t i = 0; i < c.layers; ++i) {
    block(l, c, fmt::format("layers.{}.", i), c.experts);
    attention_extras(l, c, i);
  }
  if (side.is_object()) engram(l, c, side);
  dspark(l, c, t);
  return ok_status();
}

}  // namespace qrepack
