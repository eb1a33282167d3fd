// colibri-olmoe from GGUF: the plan (src/targets/olmoe_gguf.h). llama.cpp's OLMoE names map to
// the HF names olmoe.c loads through one table; every tensor is claimed or refused, every
// shape checked against the olmoe.* metadata, before anything is written.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/ggml_quants.h"
#include "targets/container/planners.h"
#include "targets/olmoe/olmoe_gguf.h"

namespace qrepack {
namespace {

constexpr std::string_view kTarget = "colibri-olmoe (olmoe.c) from GGUF";
constexpr std::size_t kFlushEvery = 512;

// Per-layer GGUF kinds (blk.L.<kind>.weight) and the HF suffix each becomes; the expert kinds
// carry the projection index instead.
struct LayerName {
  std::string_view gguf;
  std::string_view hf;
  int projection;  ///< 0 gate, 1 up, 2 down for fused experts; -1 dense
};
constexpr std::array kLayerNames = {
    LayerName{"attn_norm", "input_layernorm.weight", -1},
    LayerName{"ffn_norm", "post_attention_layernorm.weight", -1},
    LayerName{"attn_q", "self_attn.q_proj.weight", -1},
    LayerName{"attn_k", "self_attn.k_proj.weight", -1},
    LayerName{"attn_v", "self_attn.v_proj.weight", -1},
    LayerName{"attn_output", "self_attn.o_proj.weight", -1},
    LayerName{"attn_q_norm", "self_attn.q_norm.weight", -1},
    LayerName{"attn_k_norm", "self_attn.k_norm.weight", -1},
    LayerName{"ffn_gate_inp", "mlp.gate.weight", -1},
    LayerName{"ffn_gate_exps", "", 0},
    LayerName{"ffn_up_exps", "", 1},
    LayerName{"ffn_down_exps", "", 2},
};
constexpr std::array<std::array<std::string_view, 2>, 3> kGlobalNames = {{
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output.weight", "lm_head.weight"},
    {"output_norm.weight", "model.norm.weight"},
}};

struct Mapped {
  std::string hf;           ///< dense: its HF name
  std::uint64_t layer = 0;  ///< per-layer tensors
  const LayerName* kind = nullptr;
};

// blk.<decimal, no leading zero>.<kind>.weight, or a global name; nullopt when unknown.
std::optional<Mapped> map_name(std::string_view n) {
  for (const auto& g : kGlobalNames) {
    if (n == g[0]) return Mapped{std::string(g[1])};
  }
  constexpr std::string_view pre = "blk.", tail = ".weight";
  if (!n.starts_with(pre) || !n.ends_with(tail)) return std::nullopt;
  n = n.substr(pre.size(), n.size() - pre.size() - tail.size());
  const std::size_t dot = n.find('.');
  const std::string_view num = n.substr(0, dot);
  if (dot == std::string_view::npos || num.empty() || num.size() > 9 ||
      (num.size() > 1 && num[0] == '0') || num.find_first_not_of("0123456789") != num.npos) {
    return std::nullopt;
  }
  std::uint64_t layer = 0;
  for (char c : num) layer = layer * 10 + static_cast<std::uint64_t>(c - '0');
  for (const LayerName& k : kLayerNames) {
    if (n.substr(dot + 1) == k.gguf) {
      return Mapped{k.projection < 0 ? fmt::format("model.layers.{}.{}", layer, k.hf) : "", layer,
                    &k};
    }
  }
  return std::nullopt;
}

Error metadata_error(const GgufHeader& h, std::string msg) {
  (void)h;
  return Error(ErrorKind::kInvalidConfig, std::move(msg)).with_rule("olmoe_gguf.metadata");
}

Result<std::uint64_t> dim(const GgufHeader& h, const char* key) {
  const GgufValue* v = h.find(key);
  if (!v) return metadata_error(h, fmt::format("metadata has no {}", key));
  if (!v->is_integer() || (v->is_signed() && v->as_i64() <= 0) || v->u == 0 || v->u > kMaxDim) {
    return metadata_error(h, fmt::format("{} must be an integer in 1..{}", key, kMaxDim));
  }
  return v->u;
}

// general.architecture as an error shows it: quoted (cut at 64 bytes), its type, or "missing".
std::string architecture_shown(const GgufValue* arch) {
  if (!arch) return "missing";
  if (arch->type != GgufType::kString) return std::string(gguf_type_name(arch->type));
  return fmt::format("\"{}\"", arch->s.substr(0, 64));
}

Result<GgufOlmoeDims> read_dims(const GgufHeader& h) {
  const GgufValue* arch = h.find("general.architecture");
  if (!arch || arch->type != GgufType::kString || arch->s != "olmoe") {
    return Error(ErrorKind::kUnsupportedModel,
                 fmt::format("general.architecture is {}, not \"olmoe\" (colibri-olmoe converts "
                             "OLMoE GGUFs only)",
                             architecture_shown(arch)))
        .with_rule("olmoe_gguf.architecture");
  }
  GgufOlmoeDims d{};
  QR_ASSIGN_OR_RETURN(hidden, dim(h, "olmoe.embedding_length"));
  QR_ASSIGN_OR_RETURN(layers, dim(h, "olmoe.block_count"));
  QR_ASSIGN_OR_RETURN(heads, dim(h, "olmoe.attention.head_count"));
  QR_ASSIGN_OR_RETURN(kv, dim(h, "olmoe.attention.head_count_kv"));
  QR_ASSIGN_OR_RETURN(experts, dim(h, "olmoe.expert_count"));
  QR_ASSIGN_OR_RETURN(topk, dim(h, "olmoe.expert_used_count"));
  QR_ASSIGN_OR_RETURN(inter, dim(h, "olmoe.feed_forward_length"));
  const GgufValue* tokens = h.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::kArray || tokens->array->items.empty()) {
    return metadata_error(h, "metadata has no tokenizer.ggml.tokens (it gives vocab_size)");
  }
  d = {hidden, layers, heads, kv, experts, topk, inter, tokens->array->items.size()};
  // olmoe.c: q/k/v/o are [D, D] (as many KV heads as heads); each layer is 12 tensors.
  if (kv != heads || topk > experts || hidden % heads != 0 || layers > h.tensors.size()) {
    return metadata_error(h, fmt::format("olmoe.c needs head_count_kv == head_count ({} vs {}), "
                                         "expert_used_count <= expert_count ({} vs {}), "
                                         "embedding_length a multiple of the heads and a "
                                         "tensor set per block ({} blocks)",
                                         kv, heads, topk, experts, layers));
  }
  return d;
}

// HF shape each dense tensor must have.
std::vector<std::uint64_t> dense_shape(const Mapped& m, const GgufOlmoeDims& d) {
  if (!m.kind) {
    if (m.hf == "model.norm.weight") return {d.hidden};
    return {d.vocab, d.hidden};
  }
  const std::string_view k = m.kind->gguf;
  if (k == "ffn_gate_inp") return {d.experts, d.hidden};
  if (k.ends_with("norm")) return {d.hidden};
  return {d.hidden, d.hidden};
}

std::vector<std::uint64_t> hf_shape(const GgufTensor& t) {
  return {t.dims.rbegin(), t.dims.rend()};
}

struct Claimed {
  std::vector<std::pair<const GgufTensor*, Mapped>> dense;  ///< GGUF order
  std::vector<std::array<const GgufTensor*, 3>> experts;
};

void claim_one(const GgufTensor& t, const GgufOlmoeDims& d, Claimed& c,
               std::vector<std::string>& problems) {
  const std::optional<Mapped> m = map_name(t.name);
  const GgmlTypeInfo* type = ggml_type_info(t.ggml_type);
  if (!m || (m->kind && m->layer >= d.layers)) {
    problems.push_back(t.name);
    return;
  }
  if (!type) {  // an id past qrepack's table (the header accepts 40 and up, unsized)
    problems.push_back(fmt::format("{} (ggml type {} is newer than qrepack's table: no decoder)",
                                   t.name, t.ggml_type));
    return;
  }
  if (!type->decodes) {
    problems.push_back(fmt::format("{} (ggml type {} has no decoder)", t.name, type->name));
    return;
  }
  if (m->kind && m->kind->projection >= 0) {
    const int p = m->kind->projection;
    const std::uint64_t rows = p == 2 ? d.hidden : d.inter, cols = p == 2 ? d.inter : d.hidden;
    if (t.dims != std::vector<std::uint64_t>{cols, rows, d.experts}) {
      problems.push_back(fmt::format("{}: dims [{}], not [{}, {}, {}]", t.name,
                                     fmt::join(t.dims, ", "), cols, rows, d.experts));
      return;
    }
    c.experts[m->layer][static_cast<std::size_t>(p)] = &t;
    return;
  }
  const std::vector<std::uint64_t> want = dense_shape(*m, d);
  if (hf_shape(t) != want) {
    problems.push_back(fmt::format("{}: shape [{}], metadata implies [{}]", t.name,
                                   fmt::join(hf_shape(t), ", "), fmt::join(want, ", ")));
    return;
  }
  c.dense.emplace_back(&t, *m);
}

Result<Claimed> claim(const GgufFile& f, const GgufOlmoeDims& d) {
  Claimed c;
  c.experts.assign(d.layers, {nullptr, nullptr, nullptr});
  std::vector<std::string> problems;
  std::map<std::string, bool> seen;
  std::set<std::string_view> in_file;  // a tensor refused for its type or shape is not missing
  for (const GgufTensor& t : f.header().tensors) {
    claim_one(t, d, c, problems);
    in_file.insert(t.name);
  }
  for (const auto& [t, m] : c.dense) seen[m.hf] = true;
  const auto need = [&](const std::string& hf, const std::string& gguf) {
    if (!seen.contains(hf) && !in_file.contains(gguf)) problems.push_back("missing " + gguf);
  };
  for (const auto& g : kGlobalNames) need(std::string(g[1]), std::string(g[0]));
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    for (const LayerName& k : kLayerNames) {
      const std::string gguf = fmt::format("blk.{}.{}.weight", l, k.gguf);
      if (k.projection < 0) {
        need(fmt::format("model.layers.{}.{}", l, k.hf), gguf);
      } else if (!c.experts[l][static_cast<std::size_t>(k.projection)] && !in_file.contains(gguf)) {
        problems.push_back("missing " + gguf);
      }
    }
  }
  if (!problems.empty()) return unknown_tensors_error(f.path(), kTarget, problems);
  return c;
}

Dtype dense_dtype(const GgufTensor& t) { return t.dims.size() == 1 ? Dtype::kF32 : Dtype::kF16; }

// safetensors' file order: wider dtypes first (F32, F16, I8), names ascending.
void sort_file(GgufOlmoeFile& f) {
  const auto rank = [](Dtype t) { return t == Dtype::kF32 ? 0 : t == Dtype::kF16 ? 1 : 2; };
  std::sort(f.tensors.begin(), f.tensors.end(), [&](const auto& a, const auto& b) {
    const int ra = rank(a.spec.dtype), rb = rank(b.spec.dtype);
    return ra != rb ? ra < rb : a.spec.name < b.spec.name;
  });
}

void lay_out(const Claimed& c, const GgufOlmoeDims& d, const GgufOlmoeOptions& o,
             GgufOlmoePlan& plan) {
  std::vector<GgufOlmoeFile> files(1);
  const auto add = [&](GgufOlmoeOutput out) {
    if (files.back().tensors.size() >= kFlushEvery) files.emplace_back();
    files.back().tensors.push_back(std::move(out));
  };
  for (const auto& [t, m] : c.dense) {
    GgufOlmoeOutput out{{m.hf, dense_dtype(*t), hf_shape(*t)}, t};
    const bool qk = m.kind && (m.kind->gguf == "attn_q" || m.kind->gguf == "attn_k");
    if (o.qk_permuted && qk) out.permute_heads = d.heads;  // kv == heads (read_dims)
    add(std::move(out));
    plan.sources.push_back({t->name, "convert",
                            t->dims.size() == 1 ? "olmoe_gguf.dense_f32" : "olmoe_gguf.dense_f16"});
  }
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    for (std::uint64_t e = 0; e < d.experts; ++e) {
      const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", l, e);
      // A pair is never split: a file closes only after both went in.
      if (files.back().tensors.size() >= kFlushEvery) files.emplace_back();
      files.back().tensors.push_back(
          {{p + "merged_weight", Dtype::kI8, {3 * d.inter * d.hidden}}, nullptr, 0, l, e, false});
      files.back().tensors.push_back(
          {{p + "qs", Dtype::kF32, {2 * d.inter + d.hidden}}, nullptr, 0, l, e, true});
    }
    for (const GgufTensor* t : c.experts[l]) {
      plan.sources.push_back({t->name, "merge", "olmoe_gguf.expert_int8"});
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    files[i].name = fmt::format("model-{:05d}.safetensors", i);
    plan.out_tensors += files[i].tensors.size();
    sort_file(files[i]);
  }
  plan.files = std::move(files);
  plan.experts = c.experts;
}

}  // namespace

Result<GgufOlmoePlan> plan_olmoe_gguf(const GgufFile& f, const GgufOlmoeOptions& o) {
  auto in_file = [&](Error e) { return std::move(e.in_file(f.path())); };
  auto dims = read_dims(f.header());
  if (!dims.ok()) return in_file(std::move(dims).error());
  const GgufOlmoeDims& d = *dims;
  if (d.layers * (12 + 2 * d.experts) > kMaxModelWeights) {
    return in_file(Error(ErrorKind::kLimitExceeded,
                         fmt::format("{} blocks x {} experts is over the cap of {} outputs",
                                     d.layers, d.experts, kMaxModelWeights))
                       .with_rule("config.max_weights"));
  }
  QR_ASSIGN_OR_RETURN(claimed, claim(f, d));
  GgufOlmoePlan plan;
  plan.dims = d;
  auto config = olmoe_gguf_config(f.header(), o.norm_topk_prob);
  if (!config.ok()) return in_file(std::move(config).error());
  plan.config_json = std::move(*config);
  auto tokenizer = olmoe_gguf_tokenizer(f.header());
  if (!tokenizer.ok()) return in_file(std::move(tokenizer).error());
  plan.tokenizer_json = std::move(*tokenizer);
  lay_out(claimed, d, o, plan);
  return plan;
}

}  // namespace qrepack
