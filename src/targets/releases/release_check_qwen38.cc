// check-load for Qwen3.8-Flash-Next's official releases (model_type qwen4_exp), which c/qwen38.c
// runs as downloaded. Mirrors c/qwen38_core.h's model_init_range() and c/st.h at colibri
// 04ee7453: every key from text_config when present (else the root), no fallback between them;
// the prefix model.language_model (else model) from embed_tokens; lm_head; the final
// hyper_connection_mixer; per layer two hyper-connections, the router, the shared expert and, by
// layer_types, the DeltaNet or the (gated) sparse-attention tensors, each matrix exact
// [rows, cols] BF16/F16/F32 and each vector an exact element count; the per-layer n-gram
// embedding on ple_layer_ids[0]; every routed expert fused, per-expert F8_E4M3 + 128x128
// weight_scale_inv, or per-expert float (the engine reads them lazily; a release check requires
// them); and st.h's refusal of the whole directory for a dtype it does not index. MTP and vision
// tensors are not read at that version, so not checked.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <vector>

#include "qrepack/checkpoint/glm_moe.h"
#include "targets/releases/release_check.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kBlock = 128, kIntMax = INT_MAX;

struct Q38 {
  std::uint64_t hidden, layers, vocab, positions, eos, hc, rank, wide;
  std::uint64_t heads, kv_heads, head_dim, rotary, idx_heads, idx_kv, idx_dim, budget, ratio;
  std::uint64_t experts, topk, inter, shared;
  std::uint64_t nk, nv, dk, dv, conv_k, conv_dim;
  std::uint64_t ple_dim, ple_conv, ngram, per_ngram, ngram_heads, parts;
  std::int64_t ple_layer = -1;
  std::vector<bool> attn;
};

// The text config as q38_load_cfg reads it: each refusal one "config.json: ..." entry.
class Cfg {
 public:
  Cfg(const Json& t, TargetLoadReport& r) : t_(t), r_(r) {}

  bool need(bool ok, std::string_view what) {
    if (!ok) r_.unloadable.push_back(fmt::format("config.json: {}", what));
    return ok;
  }
  // q38_num_int: a JSON number holding a non-negative integer (2.0 too).
  std::uint64_t num(const Json& o, const char* key, std::optional<std::uint64_t> def) {
    if (!o.contains(key)) {
      need(def.has_value(), fmt::format("missing numeric \"{}\"", key));
      return def.value_or(0);
    }
    const double v = o[key].is_number() ? o[key].get<double>() : -1;
    if (!need(o[key].is_number(), fmt::format("\"{}\" must be numeric (a single number)", key)) ||
        !need(std::isfinite(v) && std::floor(v) == v && v >= 0 && v <= double(kIntMax),
              fmt::format("\"{}\" must be an integer in [0, {}]", key, kIntMax))) {
      return 0;
    }
    return static_cast<std::uint64_t>(v);
  }
  std::uint64_t num(const char* key, std::optional<std::uint64_t> def = std::nullopt) {
    return num(t_, key, def);
  }
  double real(const Json& o, const char* key, double def) {
    if (!o.contains(key)) return def;
    need(o[key].is_number(), fmt::format("\"{}\" must be numeric", key));
    return o[key].is_number() ? o[key].get<double>() : def;
  }
  // q38_require_string (absent allowed unless `present`) and q38_require_bool.
  void string_is(const Json& o, const char* key, const char* want, bool present = false) {
    const bool ok =
        o.contains(key) ? o[key].is_string() && o[key].get<std::string>() == want : !present;
    need(ok, fmt::format("\"{}\" must be {}\"{}\"", key, present ? "explicitly " : "", want));
  }
  void is_false(const char* key) {
    need(!t_.contains(key) || t_[key] == false, fmt::format("\"{}\" must be false", key));
  }
  const Json& t() const { return t_; }

 private:
  const Json& t_;
  TargetLoadReport& r_;
};

void read_rope(Cfg& c, Q38& q) {
  const Json& t = c.t();
  const Json* rp = t.contains("rope_parameters") ? &t["rope_parameters"] : nullptr;
  if (rp && !c.need(rp->is_object(), "\"rope_parameters\" must be an object")) return;
  if (rp) c.string_is(*rp, "rope_type", "default");
  const double theta = rp ? c.real(*rp, "rope_theta", 10000) : c.real(t, "rope_theta", 10000);
  const double eps = c.real(t, "rms_norm_eps", 1e-6);
  c.need(std::isfinite(theta) && theta > 0 && std::isfinite(eps) && eps > 0,
         "rope_theta and rms_norm_eps must be positive");
  const double tc = c.real(t, "partial_rotary_factor", 1);
  const double rotary = double(q.head_dim) * (rp ? c.real(*rp, "partial_rotary_factor", tc) : tc);
  const bool fits = std::isfinite(rotary) && rotary >= 0 && rotary <= double(kIntMax);
  q.rotary = fits ? static_cast<std::uint64_t>(rotary) : 0;  // Python int(): truncation
}

void read_dims(Cfg& c, Q38& q) {
  q.hidden = c.num("hidden_size");
  q.layers = c.num("num_hidden_layers");
  q.vocab = c.num("vocab_size");
  q.positions = c.num("max_position_embeddings");
  q.eos = c.num("eos_token_id");
  q.hc = c.num("hc_count", 4);
  q.rank = c.num("hc_lowrank", 320);
  q.heads = c.num("num_attention_heads");
  q.kv_heads = c.num("num_key_value_heads");
  q.head_dim = c.num("head_dim");
  q.idx_heads = c.num("indexer_n_heads");
  q.idx_kv = c.num("indexer_kv_heads");
  q.idx_dim = c.num("indexer_head_dim");
  q.budget = c.num("indexer_budget");
  q.ratio = c.num("indexer_compress_ratio");
  q.experts = c.num("num_experts");
  q.topk = c.num("num_experts_per_tok");
  q.inter = c.num("moe_intermediate_size");
  q.shared = c.num("shared_expert_intermediate_size");
  q.nk = c.num("linear_num_key_heads");
  q.nv = c.num("linear_num_value_heads");
  q.dk = c.num("linear_key_head_dim");
  q.dv = c.num("linear_value_head_dim");
  q.conv_k = c.num("linear_conv_kernel_dim");
  q.ple_dim = c.num("ple_embed_dim", q.hidden);
  q.ple_conv = c.num("ple_conv_kernel_size", 4);
  q.ngram = c.num("ngram_size", 3);
  q.per_ngram = c.num("heads_per_ngram", 8);
  q.parts = c.num("split_ngram_parts", 1);
  q.wide = q.hc * q.hidden;
  q.conv_dim = 2 * q.nk * q.dk + q.nv * q.dv;
  q.ngram_heads = q.ngram > 0 ? (q.ngram - 1) * q.per_ngram : 0;
}

void read_layers(Cfg& c, Q38& q) {
  const Json& t = c.t();
  if (t.contains("ple_layer_ids") && t["ple_layer_ids"].is_array() && !t["ple_layer_ids"].empty()) {
    const Json& ids = t["ple_layer_ids"];
    const bool one = ids.size() == 1 && ids[0].is_number();
    const double v = one ? ids[0].get<double>() : 0;
    if (c.need(one, "\"ple_layer_ids\" must list exactly one layer") &&
        c.need(std::isfinite(v) && std::floor(v) == v && v >= 1 && v <= double(kIntMax),
               "\"ple_layer_ids\"[0] must be a positive integer")) {
      q.ple_layer = static_cast<std::int64_t>(v) - 1;
    }
  }
  const bool list = t.contains("layer_types") && t["layer_types"].is_array() &&
                    t["layer_types"].size() == q.layers;
  if (!c.need(list, fmt::format("\"layer_types\" must have {} entries", q.layers))) return;
  for (const Json& x : t["layer_types"]) {
    const std::string s = x.is_string() ? x.get<std::string>() : "";
    c.need(s == "linear_attention" || s == "full_attention" || s == "qwen_sparse_attention",
           fmt::format("unsupported layer type \"{}\"", s));
    q.attn.push_back(s != "linear_attention");
  }
}

// q38_validate_cfg.
void validate(Cfg& c, const Q38& q) {
  c.need(q.hidden > 0 && q.hidden <= 65536, "hidden_size must be in [1, 65536]");
  c.need(q.layers > 0 && q.layers <= 512, "num_hidden_layers must be in [1, 512]");
  c.need(q.vocab > 0 && q.positions > 0, "vocab_size and max_position_embeddings must be > 0");
  c.need(q.eos < q.vocab, "eos_token_id must be below vocab_size");
  c.need(q.hc > 1 && q.hc <= 16 && q.rank > 0 && q.rank <= 65536, "hc_count/hc_lowrank invalid");
  c.need(q.heads > 0 && q.kv_heads > 0 && q.heads % q.kv_heads == 0, "attention heads invalid");
  c.need(q.head_dim > 0 && q.rotary > 0 && q.rotary % 2 == 0 && q.rotary <= q.head_dim &&
             2 * q.heads * q.head_dim <= kIntMax,
         "head_dim / partial_rotary_factor invalid");
  c.need(q.idx_heads > 0 && q.idx_kv == 1 && q.idx_dim >= q.rotary &&
             (q.idx_heads + q.idx_kv) * q.idx_dim <= kIntMax,
         "indexer heads invalid (indexer_kv_heads must be 1)");
  c.need(q.ratio > 0 && q.budget > 0 && q.budget % q.ratio == 0,
         "indexer_budget must be a multiple of indexer_compress_ratio");
  c.need(q.experts > 0 && q.experts <= 1024 && q.topk > 0 && q.topk <= 256 && q.topk <= q.experts,
         "num_experts / num_experts_per_tok invalid");
  c.need(q.inter > 0 && q.shared > 0, "MoE widths invalid");
  c.need(q.nk > 0 && q.nv > 0 && q.nv % q.nk == 0 && q.dk > 0 && q.dv > 0 && q.dv <= 512 &&
             q.conv_k >= 2 && q.conv_dim <= kIntMax,
         "DeltaNet dimensions invalid");
  c.need(q.ngram == 3 && q.ngram_heads > 0 && q.ngram_heads <= 64 && q.ple_dim > 0 &&
             q.ple_dim % q.ngram_heads == 0 && q.ple_dim / q.ngram_heads <= 512 && q.ple_conv >= 2,
         "PLE dimensions invalid (ngram_size must be 3)");
  c.need(q.parts > 0 && q.parts <= 512, "split_ngram_parts must be in [1, 512]");
  c.need(q.ple_layer >= 0 && std::uint64_t(q.ple_layer) < q.layers,
         "\"ple_layer_ids\" must name one layer of the model");
}

bool read_config(const Json& config, TargetLoadReport& r, Q38& q) {
  const std::size_t before = r.unloadable.size();
  if (config.contains("text_config") && !config["text_config"].is_object()) {
    r.unloadable.push_back("config.json: \"text_config\" must be an object");
    return false;
  }
  Cfg c(release_text_config(config), r);
  c.string_is(c.t(), "model_type", "qwen4_exp_text", true);
  c.string_is(c.t(), "hidden_act", "silu");
  c.string_is(c.t(), "output_gate_type", "sigmoid", true);
  c.is_false("attention_bias");
  c.is_false("tie_word_embeddings");
  read_dims(c, q);
  read_rope(c, q);
  read_layers(c, q);
  if (r.unloadable.size() == before) validate(c, q);
  return r.unloadable.size() == before;
}

void mat(Loader& l, const std::string& n, std::uint64_t rows, std::uint64_t cols) {
  release_tensor(l, n, {Dtype::kBF16, Dtype::kF16, Dtype::kF32}, {rows, cols});
}
void vec(Loader& l, const std::string& n, std::uint64_t numel) {
  release_floats(l, n, numel, true);
}

// st.h indexes these dtypes only; any other exits before a tensor is read.
void directory_dtypes(Loader& l) {
  for (const TensorRef t : l.ck().tensors()) {
    const Dtype d = t.entry->dtype;
    if (is_float(d) || d == Dtype::kU8 || d == Dtype::kI8 || d == Dtype::kF8E4M3 ||
        d == Dtype::kF8E8M0 || d == Dtype::kI64 || d == Dtype::kU64) {
      continue;
    }
    l.bad(std::string(t.entry->name),
          fmt::format("dtype {}: c/st.h refuses the whole directory", dtype_info(d).safetensors));
  }
}

void hyper(Loader& l, const Q38& q, const std::string& p, bool inject) {
  vec(l, p + "hc_norm.weight", q.wide);
  mat(l, p + "input_mix_weight_down.weight", q.rank, q.wide);
  mat(l, p + "input_mix_weight_up.weight", q.wide, q.rank);
  if (inject) mat(l, p + "block_inject_weight.weight", q.hc, q.wide);
}

void attention(Loader& l, const Q38& q, const std::string& p) {
  mat(l, p + "q_proj.weight", 2 * q.heads * q.head_dim, q.hidden);  // query + output gate
  mat(l, p + "k_proj.weight", q.kv_heads * q.head_dim, q.hidden);
  mat(l, p + "v_proj.weight", q.kv_heads * q.head_dim, q.hidden);
  mat(l, p + "o_proj.weight", q.hidden, q.heads * q.head_dim);
  vec(l, p + "q_norm.weight", q.head_dim);
  vec(l, p + "k_norm.weight", q.head_dim);
  mat(l, p + "indexer.index_qk_proj.weight", (q.idx_heads + q.idx_kv) * q.idx_dim, q.hidden);
  vec(l, p + "indexer.q_layernorm.weight", q.idx_dim);
  vec(l, p + "indexer.k_layernorm.weight", q.idx_dim);
}

void deltanet(Loader& l, const Q38& q, const std::string& p) {
  mat(l, p + "in_proj_qkv.weight", q.conv_dim, q.hidden);
  mat(l, p + "in_proj_z.weight", q.nv * q.dv, q.hidden);
  mat(l, p + "in_proj_b.weight", q.nv, q.hidden);
  mat(l, p + "in_proj_a.weight", q.nv, q.hidden);
  vec(l, p + "conv1d.weight", q.conv_dim * q.conv_k);
  vec(l, p + "dt_bias", q.nv);
  vec(l, p + "A_log", q.nv);
  vec(l, p + "norm.weight", q.dv);
  mat(l, p + "out_proj.weight", q.hidden, q.nv * q.dv);
}

void experts(Loader& l, const Q38& q, const std::string& p) {
  const std::uint64_t e = q.experts, h = q.hidden, i = q.inter;
  if (l.ck().find(p + "gate_up_proj")) {
    release_tensor(l, p + "gate_up_proj", {Dtype::kBF16, Dtype::kF16, Dtype::kF32}, {e, 2 * i, h});
    release_tensor(l, p + "down_proj", {Dtype::kBF16, Dtype::kF16, Dtype::kF32}, {e, h, i});
    return;
  }
  for (std::uint64_t x = 0; x < e; ++x) {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = proj[0] == 'd';
      const std::string w = fmt::format("{}{}.{}.weight", p, x, proj);
      const auto t = l.ck().find(w);
      if (t && t->entry->dtype == Dtype::kF8E4M3) {
        release_fp8(l, w, w + "_scale_inv", down ? h : i, down ? i : h, kBlock,
                    {Dtype::kBF16, Dtype::kF16, Dtype::kF32});
      } else {
        mat(l, w, down ? h : i, down ? i : h);
      }
    }
  }
}

void layer(Loader& l, const Q38& q, const std::string& p, bool attn) {
  hyper(l, q, p + "attn_hyper_connection.", true);
  hyper(l, q, p + "mlp_hyper_connection.", true);
  mat(l, p + "mlp.gate.weight", q.experts, q.hidden);
  mat(l, p + "mlp.shared_expert.gate_proj.weight", q.shared, q.hidden);
  mat(l, p + "mlp.shared_expert.up_proj.weight", q.shared, q.hidden);
  mat(l, p + "mlp.shared_expert.down_proj.weight", q.hidden, q.shared);
  vec(l, p + "mlp.shared_expert_gate.weight", q.hidden);
  if (attn) {
    attention(l, q, p + "self_attn.");
  } else {
    deltanet(l, q, p + "linear_attn.");
  }
  experts(l, q, p + "mlp.experts.");
}

// An I64/U64 buffer of `n` entries, its values (empty when it is unusable).
std::vector<std::int64_t> index_list(Loader& l, const std::string& name, std::uint64_t n) {
  const auto t = l.get(name);
  if (!t) return {};
  const Dtype d = t->entry->dtype;
  if (d != Dtype::kI64 && d != Dtype::kU64) {
    l.bad(name, fmt::format("dtype {}, the loader reads I64/U64", dtype_info(d).safetensors));
    return {};
  }
  if (t->entry->numel() != n) {
    l.bad(name, fmt::format("{} elements, the config implies {}", t->entry->numel(), n));
    return {};
  }
  std::vector<std::int64_t> v(n);
  const Status s =
      l.ck().read(*t, 0, {reinterpret_cast<std::uint8_t*>(v.data()), n * sizeof(std::int64_t)});
  if (!s.ok()) {
    l.bad(name, "unreadable");
    return {};
  }
  ++l.report().checked;
  return v;
}

// The rows of one n-gram table part ([rows, ngram_head_dim], F8_E4M3 or float), 0 when unusable.
std::uint64_t table_rows(Loader& l, const Q38& q, const std::string& name) {
  const auto t = l.get(name);
  if (!t) return 0;
  const auto& s = t->entry->shape;
  const std::uint64_t dim = q.ple_dim / q.ngram_heads;
  if (!is_float(t->entry->dtype) && t->entry->dtype != Dtype::kF8E4M3) {
    l.bad(name, fmt::format("dtype {}, the loader reads F8_E4M3/BF16/F16/F32",
                            dtype_info(t->entry->dtype).safetensors));
  } else if (s.size() != 2 || s[0] == 0 || s[1] != dim) {
    l.bad(name, fmt::format("shape [{}], the loader reads [rows, {}]", fmt::join(s, ", "), dim));
  } else {
    ++l.report().checked;
    return s[0];
  }
  return 0;
}

// The rows the hashed n-gram heads address: max(offset + vocab), or nullopt when invalid.
std::optional<std::uint64_t> ngram_need(Loader& l, const Q38& q, const std::string& e) {
  index_list(l, e + "layer_multipliers", q.ngram);
  const auto vocab = index_list(l, e + "ngram_heads_vocab_sizes", q.ngram_heads);
  const auto offset = index_list(l, e + "ngram_heads_offsets", q.ngram_heads);
  if (vocab.empty() || offset.empty()) return std::nullopt;
  std::uint64_t need = 0;
  for (std::uint64_t h = 0; h < q.ngram_heads; ++h) {
    if (vocab[h] <= 0 || offset[h] < 0 || vocab[h] > INT64_MAX - offset[h]) {
      l.bad(e + "ngram_heads_vocab_sizes", fmt::format("head {}: invalid range", h));
      return std::nullopt;
    }
    need = std::max(need, std::uint64_t(offset[h] + vocab[h]));
  }
  return need;
}

void ple(Loader& l, const Q38& q, const std::string& p) {
  mat(l, p + "key_proj.weight", q.wide, q.ple_dim);
  mat(l, p + "value_proj.weight", q.hidden, q.ple_dim);
  for (const char* n : {"norm_key.weight", "norm_query.weight", "norm_conv.weight"}) {
    vec(l, p + n, q.wide);
  }
  vec(l, p + "conv1d.weight", q.wide * q.ple_conv);
  const std::string e = p + "ple_embedding.", g = e + "ngram_embedding.";
  const auto need = ngram_need(l, q, e);
  std::uint64_t rows = 0;
  if (l.ck().find(g + "weight")) {
    rows = table_rows(l, q, g + "weight");
  } else {
    for (std::uint64_t part = 0; part < q.parts; ++part) {
      rows += table_rows(l, q, fmt::format("{}shard_{}.weight", g, part));
    }
  }
  if (l.ck().find(g + "weight_scale")) vec(l, g + "weight_scale", 1);
  if (need && rows < *need) {
    l.bad(g + "weight", fmt::format("{} rows, the n-gram heads address {}", rows, *need));
  }
}

}  // namespace

Status check_qwen38_release(const ReleaseInput& in, Loader& l) {
  auto& r = l.report();
  directory_dtypes(l);
  Q38 q{};
  if (!read_config(in.config, r, q)) return ok_status();
  if (q.layers * (q.experts * 6 + 80) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  std::string p = "model.language_model.";
  if (!l.ck().find(p + "embed_tokens.weight")) p = "model.";
  if (!l.ck().find(p + "embed_tokens.weight")) {
    r.missing.push_back("model.language_model.embed_tokens.weight (or model.embed_tokens.weight)");
    return ok_status();
  }
  mat(l, p + "embed_tokens.weight", q.vocab, q.hidden);
  mat(l, "lm_head.weight", q.vocab, q.hidden);
  hyper(l, q, p + "hyper_connection_mixer.", false);
  for (std::uint64_t i = 0; i < q.layers; ++i) {
    layer(l, q, fmt::format("{}layers.{}.", p, i), q.attn[i]);
  }
  ple(l, q, fmt::format("{}layers.{}.ple.", p, q.ple_layer));
  return ok_status();
}

}  // namespace qrepack
