// check-load for DeepSeek V4 Flash as released (model_type deepseek_v4): the tensor manifest
// c/deepseek_v4.c derives from config.json alone (upstream dsv4_model.h, archive id
// 62604808221; the later roles pinned by tests/test_dsv4_model.c, id 62735446955) and what
// its loaders accept (coli_tensor_load_fp8 / coli_tensor_load_f32 in c/deepseek_v4.c @
// 02dec8af): names without a `model.` prefix; FP8 e4m3 weights with an F8_E8M0 `.scale` of
// [ceil(O/128), ceil(I/128)]; routed experts FP4 ([O, I/2] + UE8M0 [O, I/32]); head.weight
// and the compressors' wkv / wgate BF16 (a BF16 decode of F16 bits would be a silent misread,
// so F16 is refused); the other plain tensors F32 or BF16; ffn.gate.tid2eid (I64, read as
// int64) on the first num_hash_layers layers, ffn.gate.bias on the others. config.json must
// carry what coli_v4_config_parse requires (runtime_keys). The speculative head (mtp.*) is not
// in the runtime's manifest and is not checked.
#include <fmt/format.h>

#include <utility>

#include "qrepack/checkpoint/glm_moe.h"
#include "targets/releases/release_check.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kBlock = 128;

struct V4 {
  std::uint64_t vocab, dim, layers, heads, head_dim, q_lora, o_lora, o_groups;
  std::uint64_t experts, topk, inter, shared, hash_layers, index_heads, index_dim, hc;
  std::vector<std::uint64_t> ratios;
};

// The keys coli_v4_config_parse (c/deepseek_v4.c) requires beyond the dims: it refuses a
// config without any of them, or with another value for the fixed strings.
void runtime_keys(const Json& c, TargetLoadReport& r) {
  const std::pair<const char*, const char*> fixed[] = {
      {"expert_dtype", "fp4"}, {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}};
  for (const auto& [key, want] : fixed) {
    if (!c.contains(key) || c[key] != Json(want)) {
      r.unloadable.push_back(fmt::format(
          "config.json: {} must be \"{}\" (deepseek_v4.c's config parser requires it)", key, want));
    }
  }
  for (const char* key : {"rms_norm_eps", "hc_eps", "routed_scaling_factor", "swiglu_limit",
                          "rope_theta", "compress_rope_theta"}) {
    if (!c.contains(key) || !c[key].is_number()) {
      r.unloadable.push_back(fmt::format("config.json: missing number {}", key));
    }
  }
  release_key(c, {"num_nextn_predict_layers"}, r);
  release_key(c, {"index_topk"}, r);
  release_key(c, {"max_position_embeddings"}, r);
  if (!c.contains("rope_scaling") || !c["rope_scaling"].is_object()) {
    r.unloadable.push_back("config.json: missing object rope_scaling");
  } else {
    const Json& s = c["rope_scaling"];
    release_key(s, {"original_max_position_embeddings"}, r);
    release_key(s, {"beta_fast"}, r);
    release_key(s, {"beta_slow"}, r);
    if (!s.contains("factor") || !s["factor"].is_number()) {
      r.unloadable.push_back("config.json: missing number rope_scaling.factor");
    }
  }
  const Json* q = c.contains("quantization_config") ? &c["quantization_config"] : nullptr;
  if (!q || !q->is_object() || !q->contains("fmt") || (*q)["fmt"] != Json("e4m3") ||
      !q->contains("scale_fmt") || (*q)["scale_fmt"] != Json("ue8m0")) {
    r.unloadable.push_back(
        "config.json: quantization_config must hold fmt \"e4m3\" and scale_fmt \"ue8m0\"");
  }
}

bool read_config(const Json& c, TargetLoadReport& r, V4& v) {
  const std::size_t before = r.unloadable.size();
  runtime_keys(c, r);
  v.dim = release_key(c, {"hidden_size"}, r);
  v.layers = release_key(c, {"num_hidden_layers"}, r);
  v.heads = release_key(c, {"num_attention_heads"}, r);
  v.head_dim = release_key(c, {"head_dim"}, r);
  release_key(c, {"qk_rope_head_dim"}, r);
  v.q_lora = release_key(c, {"q_lora_rank"}, r);
  v.o_lora = release_key(c, {"o_lora_rank"}, r);
  v.o_groups = release_key(c, {"o_groups"}, r);
  v.experts = release_key(c, {"n_routed_experts"}, r);
  v.topk = release_key(c, {"num_experts_per_tok"}, r);
  v.inter = release_key(c, {"moe_intermediate_size"}, r);
  v.shared = release_key(c, {"n_shared_experts"}, r);
  v.vocab = release_key(c, {"vocab_size"}, r);
  v.hash_layers = c.contains("num_hash_layers") ? release_key(c, {"num_hash_layers"}, r) : 0;
  v.index_heads = release_key(c, {"index_n_heads"}, r);
  v.index_dim = release_key(c, {"index_head_dim"}, r);
  v.hc = release_key(c, {"hc_mult"}, r);
  release_key(c, {"hc_sinkhorn_iters"}, r);
  release_key(c, {"sliding_window"}, r);
  v.ratios = release_int_list(c, "compress_ratios", 0, r);
  if (r.unloadable.size() != before) return false;
  if (v.layers == 0 || v.layers > 128 || v.o_groups == 0 || (v.heads * v.head_dim) % v.o_groups ||
      v.hash_layers > v.layers || v.ratios.size() < v.layers || v.shared != 1) {
    r.unloadable.push_back(
        "config.json: dims deepseek_v4.c refuses (1..128 layers, heads x head_dim a multiple of "
        "o_groups, num_hash_layers <= layers, compress_ratios covering every layer, "
        "n_shared_experts 1)");
    return false;
  }
  for (std::uint64_t x : v.ratios) {
    if (x != 0 && x != 4 && x != 128) {
      r.unloadable.push_back(
          fmt::format("config.json: compress_ratios holds {}; deepseek_v4.c reads 0, 4 or 128", x));
      return false;
    }
  }
  return true;
}

void fp8(Loader& l, const std::string& stem, std::uint64_t o, std::uint64_t i) {
  release_fp8(l, stem + ".weight", stem + ".scale", o, i, kBlock, {Dtype::kF8E8M0});
}

void plain(Loader& l, const std::string& name, std::initializer_list<std::uint64_t> shape) {
  release_tensor(l, name, {Dtype::kF32, Dtype::kBF16}, shape);
}

// A compressor of ratio `ratio` and head dim `hd` under `p` (dsv4_compressor_tensors): ratio 4
// overlaps its groups, doubling the projections' and ape's width.
void compressor(Loader& l, const V4& v, const std::string& p, std::uint64_t ratio,
                std::uint64_t hd) {
  const std::uint64_t width = (ratio == 4 ? 2 : 1) * hd;
  plain(l, p + ".ape", {ratio, width});
  release_tensor(l, p + ".wkv.weight", {Dtype::kBF16}, {width, v.dim});
  release_tensor(l, p + ".wgate.weight", {Dtype::kBF16}, {width, v.dim});
  plain(l, p + ".norm.weight", {hd});
}

void layer(Loader& l, const V4& v, std::uint64_t i) {
  const std::string p = fmt::format("layers.{}.", i);
  const std::uint64_t mix = (2 + v.hc) * v.hc, hs = v.heads * v.head_dim;
  for (const char* s : {"attn", "ffn"}) {
    plain(l, fmt::format("{}hc_{}_fn", p, s), {mix, v.hc * v.dim});
    plain(l, fmt::format("{}hc_{}_base", p, s), {mix});
    plain(l, fmt::format("{}hc_{}_scale", p, s), {3});
  }
  plain(l, p + "attn_norm.weight", {v.dim});
  plain(l, p + "ffn_norm.weight", {v.dim});
  plain(l, p + "attn.attn_sink", {v.heads});
  fp8(l, p + "attn.wq_a", v.q_lora, v.dim);
  plain(l, p + "attn.q_norm.weight", {v.q_lora});
  fp8(l, p + "attn.wq_b", hs, v.q_lora);
  fp8(l, p + "attn.wkv", v.head_dim, v.dim);
  plain(l, p + "attn.kv_norm.weight", {v.head_dim});
  fp8(l, p + "attn.wo_a", v.o_groups * v.o_lora, hs / v.o_groups);
  fp8(l, p + "attn.wo_b", v.dim, v.o_groups * v.o_lora);
  const std::uint64_t ratio = v.ratios[i];
  if (ratio > 0) compressor(l, v, p + "attn.compressor", ratio, v.head_dim);
  if (ratio == 4) {
    fp8(l, p + "attn.indexer.wq_b", v.index_heads * v.index_dim, v.q_lora);
    plain(l, p + "attn.indexer.weights_proj.weight", {v.index_heads, v.dim});
    compressor(l, v, p + "attn.indexer.compressor", 4, v.index_dim);
  }
  plain(l, p + "ffn.gate.weight", {v.experts, v.dim});
  if (i < v.hash_layers) {
    release_tensor(l, p + "ffn.gate.tid2eid", {Dtype::kI64}, {v.vocab, v.topk});
  } else {
    plain(l, p + "ffn.gate.bias", {v.experts});
  }
  for (std::uint64_t e = 0; e < v.experts; ++e) {
    const std::string x = fmt::format("{}ffn.experts.{}.", p, e);
    release_fp4(l, x + "w1.weight", x + "w1.scale", v.inter, v.dim);
    release_fp4(l, x + "w3.weight", x + "w3.scale", v.inter, v.dim);
    release_fp4(l, x + "w2.weight", x + "w2.scale", v.dim, v.inter);
  }
  fp8(l, p + "ffn.shared_experts.w1", v.inter, v.dim);
  fp8(l, p + "ffn.shared_experts.w3", v.inter, v.dim);
  fp8(l, p + "ffn.shared_experts.w2", v.dim, v.inter);
}

}  // namespace

Status check_deepseek_v4_release(const ReleaseInput& in, Loader& l) {
  auto& r = l.report();
  V4 v{};
  if (!read_config(in.config, r, v)) return ok_status();
  if (v.layers * (v.experts * 6 + 60) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  plain(l, "embed.weight", {v.vocab, v.dim});
  plain(l, "norm.weight", {v.dim});
  release_tensor(l, "head.weight", {Dtype::kBF16}, {v.vocab, v.dim});
  plain(l, "hc_head_fn", {v.hc, v.hc * v.dim});
  plain(l, "hc_head_base", {v.hc});
  plain(l, "hc_head_scale", {1});
  for (std::uint64_t i = 0; i < v.layers; ++i) layer(l, v, i);
  return ok_status();
}

}  // namespace qrepack
