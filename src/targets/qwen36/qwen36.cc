// colibri-qwen36: the Qwen3.5 / 3.6 runtime's container (upstream convert_qwen36.py with its
// tensor-kind contract qwen36_tensor_kinds.py; reference/colibri-engines.md §1.4). Families
// qwen3_5_moe (hybrid Gated DeltaNet + gated attention, text under text_config, names under
// model.language_model.) and qwen3_moe (every layer full attention, no shared expert).
//   model-globals.safetensors   model.embed_tokens.weight, model.norm.weight, lm_head.weight (F16)
//   model-LLLLL.safetensors     per layer: every non-expert tensor as F16 under model.layers.L.*;
//                               per expert model.layers.L.mlp.experts.E.merged_weight (1-D:
//                               gate | up | down quantized; <= 4 bits two's-complement nibbles,
//                               U8; 5..8 bits I8; --bits down=5..8 a mixed U8 slab) and .qs
//                               (F32 1-D: gate | up | down scales, row-major per group)
//   config.json (text_config, re-serialized as json.dump(indent=1)), config.hf.json (the
//   source's bytes), tokenizer.json, qwen36_meta.json (the dims qwen36.c reads).
// Every source name is classified by the contract; an unknown one stops the run before any
// output. mtp.* and the vision tower are recognized and dropped by named rules (the
// converter this target matches writes neither).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

#include "qrepack/core/checked.h"
#include "qrepack/schemes/scheme.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kRule = "qwen36.config";

// The layer kinds of the contract (qwen36_tensor_kinds.py), after "<prefix>layers.<i>.".
constexpr std::array<std::string_view, 28> kLayerKinds = {
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "linear_attn.A_log",
    "linear_attn.conv1d.weight",
    "linear_attn.dt_bias",
    "linear_attn.in_proj_a.weight",
    "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_qkv.weight",
    "linear_attn.in_proj_z.weight",
    "linear_attn.norm.weight",
    "linear_attn.out_proj.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate.weight",
    "mlp.shared_expert.gate_proj.weight",
    "mlp.shared_expert.up_proj.weight",
    "mlp.shared_expert.down_proj.weight",
    "mlp.shared_expert_gate.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
    "",  // sentinel: never matches a real kind
};
constexpr std::array<std::string_view, 4> kMtpGlobals = {
    "fc.weight", "norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight"};
constexpr std::array<std::string_view, 3> kProjections = {"gate_proj", "up_proj", "down_proj"};

bool layer_kind(std::string_view k) {
  for (std::string_view x : kLayerKinds) {
    if (!x.empty() && x == k) return true;
  }
  return false;
}

// "mlp.experts.<e>.<proj>.weight" -> (e, projection index).
std::optional<std::pair<std::uint64_t, std::size_t>> per_expert(std::string_view k) {
  constexpr std::string_view p = "mlp.experts.", tail = ".weight";
  if (!k.starts_with(p) || !k.ends_with(tail)) return std::nullopt;
  k = k.substr(p.size(), k.size() - p.size() - tail.size());
  const std::size_t dot = k.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto e = name_index(k.substr(0, dot));
  for (std::size_t j = 0; j < kProjections.size(); ++j) {
    if (e && k.substr(dot + 1) == kProjections[j]) return std::pair{*e, j};
  }
  return std::nullopt;
}

enum class Place : std::uint8_t { kGlobal, kLayer, kMtp, kVision, kUnknown };

struct Placed {
  Place place = Place::kUnknown;
  std::uint64_t layer = 0;
  std::string kind;  ///< layer kind, or the global's output name
};

Placed classify(std::string_view n, std::string_view prefix) {
  if (n.starts_with("mtp.")) {
    const std::string_view rest = n.substr(4);
    for (std::string_view g : kMtpGlobals) {
      if (rest == g) return {Place::kMtp, 0, {}};
    }
    if (rest.starts_with("layers.0.")) {
      const std::string_view k = rest.substr(9);
      if ((layer_kind(k) || per_expert(k)) && !k.starts_with("linear_attn."))
        return {Place::kMtp, 0, {}};
    }
    return {};
  }
  if (n.starts_with("model.visual.") || n.starts_with("visual.")) return {Place::kVision, 0, {}};
  if (n == "lm_head.weight" || n == std::string(prefix) + "lm_head.weight") {
    return {Place::kGlobal, 0, "lm_head.weight"};
  }
  if (!n.starts_with(prefix)) return {};
  const std::string_view rest = n.substr(prefix.size());
  if (rest == "embed_tokens.weight" || rest == "norm.weight") {
    return {Place::kGlobal, 0, "model." + std::string(rest)};
  }
  if (!rest.starts_with("layers.")) return {};
  const std::string_view tail = rest.substr(7);
  const std::size_t dot = tail.find('.');
  if (dot == std::string_view::npos) return {};
  const auto layer = name_index(tail.substr(0, dot));
  const std::string_view k = tail.substr(dot + 1);
  if (!layer || !(layer_kind(k) || per_expert(k))) return {};
  return {Place::kLayer, *layer, std::string(k)};
}

struct Options {
  int ebits = 4;
  std::uint64_t gs = 0;
  int down_bits = 0;  ///< 0: not mixed
  std::uint64_t down_gs = 0;
};

Result<Options> resolve_options(const ContainerOptions& o) {
  QR_ASSIGN_OR_RETURN(s, parse_scheme(o.scheme));
  Options r;
  switch (s.kind) {
    case SchemeKind::kInt4Row:
      break;
    case SchemeKind::kInt4Group:
      r.gs = s.group;
      break;
    case SchemeKind::kInt8Row:
      r.ebits = 8;
      break;
    case SchemeKind::kInt2Row:
      r.ebits = 2;
      break;
    case SchemeKind::kInt3G64:
      r.ebits = 3, r.gs = 64;
      break;
    default:
      return Error(ErrorKind::kUsage,
                   fmt::format("--target colibri-qwen36 quantizes experts with int4-row, "
                               "int4-g<N>, int8-row, int2-row or int3-g64, not --to {}",
                               o.scheme))
          .with_rule("target.scheme");
  }
  if (o.expert_bits) r.ebits = o.expert_bits;
  if (o.down_bits && o.down_bits != r.ebits) {
    if (r.ebits > 4 || o.down_bits < 5) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits down={} with experts at {} bits: the mixed slab qwen36.c "
                               "reads holds int4 gate/up (experts <= 4) and int8 down (5..8)",
                               o.down_bits, r.ebits))
          .with_rule("target.scheme");
    }
    r.down_bits = o.down_bits;
    r.down_gs = o.down_group;
  } else if (o.down_group) {
    return Error(ErrorKind::kUsage, "--down-group goes with --bits down=5..8 (the mixed slab)")
        .with_rule("target.scheme");
  }
  return r;
}

QuantRule rule_for(int bits, std::uint64_t group) {
  QuantRule q;
  q.bits = bits;
  q.group = group;
  q.nibbles = Nibbles::kTwosComplement;
  return q;
}

// Python's int(value) of a config number (bounded: a file's number is input), or `fallback`.
std::int64_t json_int(const Json& c, const char* key, std::int64_t fallback) {
  if (!c.contains(key)) return fallback;
  const auto& v = c[key];
  if (v.is_number_unsigned()) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(v.get<std::uint64_t>(), kMaxDim));
  }
  if (v.is_number_integer())
    return std::max<std::int64_t>(v.get<std::int64_t>(), -static_cast<std::int64_t>(kMaxDim));
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::fabs(v.get<double>()) < 1e15) {
    return static_cast<std::int64_t>(v.get<double>());
  }
  return fallback;
}

double json_float(const Json& c, const char* key, double fallback) {
  if (!c.contains(key) || !c[key].is_number()) return fallback;
  return c[key].get<double>();
}

bool truthy(const Json& c, const char* key) {
  if (!c.contains(key)) return false;
  const auto& v = c[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return false;
}

// Everything the planner learned about the checkpoint, by layer.
struct Layer {
  std::map<std::string, std::string_view> tensors;  ///< kind -> source name
  bool fused = false;
};

class Qwen36Planner {
 public:
  Qwen36Planner(const Checkpoint& ck, const ContainerOptions& o) : ck_(ck), o_(o) {}

  Result<ContainerPlan> run() {
    QR_ASSIGN_OR_RETURN(opt, resolve_options(o_));
    opt_ = opt;
    QR_ASSIGN_OR_RETURN(full, read_config(dir(), "colibri-qwen36"));
    full_ = std::move(full);
    text_ = full_.contains("text_config") && full_["text_config"].is_object() ? full_["text_config"]
                                                                              : full_;
    plan_.model_type = json_string(full_, "model_type", json_string(text_, "model_type", ""));
    plan_.family = plan_.model_type.starts_with("qwen3_5_moe") ? "qwen3_5_moe" : "qwen3_moe";
    QR_ASSIGN_OR_RETURN(ix, index_weights(ck_, plan_));
    ix_ = std::move(ix);
    QR_TRY(place_tensors());
    QR_TRY(read_dims());
    QR_TRY(check_layers());
    build();
    return std::move(plan_);
  }

 private:
  const std::string& dir() const { return ck_.directory(); }

  Status place_tensors() {
    for (const TensorRef t : ck_.tensors()) {
      if (t.entry->name.starts_with("model.language_model.layers."))
        prefix_ = "model.language_model.";
    }
    ContainerBuilder b(plan_);
    std::vector<std::string> unknown;
    // Sidecars (FP8 scales) travel with their weights: looked up once each, not per tensor.
    std::unordered_set<std::string_view> consumed;
    for (const auto& [sidecar, weight] : plan_.recognized->consumed) consumed.insert(sidecar);
    for (const std::uint32_t i : ck_.by_name()) {
      const std::string_view n = ck_.tensors()[i].entry->name;
      if (consumed.contains(n)) continue;
      const Placed p = classify(n, prefix_);
      switch (p.place) {
        case Place::kUnknown:
          unknown.emplace_back(n);
          break;
        case Place::kMtp:
          b.source(n, "drop", "qwen36.mtp_not_converted");
          ++mtp_;
          break;
        case Place::kVision:
          b.source(n, "drop", "qwen36.vision_not_converted");
          ++vision_;
          break;
        case Place::kGlobal:
          globals_[p.kind] = n;
          break;
        case Place::kLayer:
          layers_[p.layer].tensors[p.kind] = n;
          if (p.kind == "mlp.experts.gate_up_proj" || p.kind == "mlp.experts.down_proj") {
            layers_[p.layer].fused = true;
          }
          break;
      }
    }
    if (!unknown.empty()) return unknown_tensors_error(dir(), "colibri-qwen36 (qwen36.c)", unknown);
    return ok_status();
  }

  Status config_error(std::string message) const {
    return Error(ErrorKind::kInvalidConfig, std::move(message))
        .in_file((fs::path(dir()) / "config.json").string())
        .with_rule(kRule);
  }

  Status read_dims() {
    QR_ASSIGN_OR_RETURN(h, config_dim(text_, "hidden_size", dir(), kRule));
    QR_ASSIGN_OR_RETURN(e, config_dim(text_, "num_experts", dir(), kRule));
    QR_ASSIGN_OR_RETURN(k, config_dim(text_, "num_experts_per_tok", dir(), kRule));
    QR_ASSIGN_OR_RETURN(v, config_dim(text_, "vocab_size", dir(), kRule));
    QR_ASSIGN_OR_RETURN(n, config_dim(text_, "num_hidden_layers", dir(), kRule));
    QR_ASSIGN_OR_RETURN(eps, config_number(text_, "rms_norm_eps", dir(), kRule));
    (void)eps;  // qwen36.c requires it in config.json
    hidden_ = h, experts_ = e, vocab_ = v, n_layers_ = n;
    // qwen36.c's own ranges (its validate_cfg), which also bound the lists checked below.
    if (n > 512 || e > 1024) {
      return config_error(
          fmt::format("num_hidden_layers {} (at most 512) or num_experts {} (at "
                      "most 1024) beyond what qwen36.c loads",
                      n, e));
    }
    const std::uint64_t inter_fallback = json_int(text_, "intermediate_size", 0) / 2;
    QR_ASSIGN_OR_RETURN(m,
                        config_dim(text_, "moe_intermediate_size", dir(), kRule,
                                   inter_fallback ? std::optional(inter_fallback) : std::nullopt));
    moe_inter_ = m;
    if (k > e)
      return config_error(fmt::format("num_experts_per_tok {} exceeds num_experts {}", k, e));
    if ((moe_inter_ * hidden_) % 2 != 0) {
      return config_error(
          "moe_intermediate_size x hidden_size is odd: the packed experts of "
          "qwen36.c need whole bytes per projection");
    }
    // layer_types: the config's, else what each layer's tensors say.
    if (text_.contains("layer_types") && !text_["layer_types"].is_null()) {
      const auto& lt = text_["layer_types"];
      if (!lt.is_array() || lt.size() > 512) {
        return config_error("\"layer_types\" must be a list of at most 512 layers");
      }
      for (const auto& t : lt) {
        if (!t.is_string() || (t != "linear_attention" && t != "full_attention")) {
          return config_error(
              fmt::format("\"layer_types\" holds {}, not linear_attention or "
                          "full_attention",
                          t.dump().substr(0, 40)));
        }
        layer_types_.push_back(t.get<std::string>());
      }
    } else {
      for (std::uint64_t l = 0; l < n_layers_; ++l) {
        const auto it = layers_.find(l);
        const bool linear =
            it != layers_.end() && it->second.tensors.contains("linear_attn.in_proj_qkv.weight");
        layer_types_.push_back(linear ? "linear_attention" : "full_attention");
      }
    }
    return ok_status();
  }

  std::optional<TensorRef> source(std::string_view name) const { return ck_.find(name); }

  // The logical weight of the expert projection j of expert e in layer l.
  const LogicalWeight* expert_weight(std::uint64_t l, const Layer& layer, std::uint64_t e,
                                     std::size_t j) const {
    const std::string name =
        layer.fused
            ? fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", l, e, kProjections[j])
            : fmt::format("{}layers.{}.mlp.experts.{}.{}.weight", prefix_, l, e, kProjections[j]);
    const auto it = ix_.by_name.find(name);
    return it == ix_.by_name.end() ? nullptr : it->second;
  }

  Status check_layers() {
    std::vector<std::string> problems;
    for (const char* g : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}) {
      if (!globals_.contains(g))
        problems.push_back(fmt::format("missing {} (qwen36.c reads it)", g));
    }
    for (const auto& [l, layer] : layers_) {
      if (l >= layer_types_.size()) {
        problems.push_back(
            fmt::format("layer {} is beyond the {} layers of layer_types", l, layer_types_.size()));
      }
    }
    for (std::uint64_t l = 0; l < layer_types_.size(); ++l) {
      const auto it = layers_.find(l);
      if (it == layers_.end()) {
        problems.push_back(fmt::format("layer {} of layer_types has no tensors", l));
        continue;
      }
      const bool linear = layer_types_[l] == "linear_attention";
      const std::string want =
          linear ? "linear_attn.in_proj_qkv.weight" : "self_attn.q_proj.weight";
      if (!it->second.tensors.contains(want)) {
        problems.push_back(fmt::format("layer {} is {} but has no {}", l, layer_types_[l], want));
      }
      if (!it->second.tensors.contains("mlp.gate.weight")) {
        problems.push_back(fmt::format(
            "layer {} has no router (a dense MLP: mlp_only_layers or decoder_sparse_step); "
            "qwen36.c runs every layer of an MoE model through its router and experts",
            l));
        continue;
      }
      for (std::uint64_t e = 0; e < experts_; ++e) {
        for (std::size_t j = 0; j < 3; ++j) {
          const LogicalWeight* w = expert_weight(l, it->second, e, j);
          const std::vector<std::uint64_t> shape =
              j == 2 ? std::vector<std::uint64_t>{hidden_, moe_inter_}
                     : std::vector<std::uint64_t>{moe_inter_, hidden_};
          if (!w) {
            problems.push_back(fmt::format("layer {} expert {} has no {}", l, e, kProjections[j]));
          } else if (std::vector<std::uint64_t>(w->shape) != shape) {
            problems.push_back(fmt::format("layer {} expert {} {}: shape [{}] is not [{}]", l, e,
                                           kProjections[j], fmt::join(w->shape, ", "),
                                           fmt::join(shape, ", ")));
          }
        }
      }
    }
    for (const auto& [name, why] : ix_.unclaimed) {
      const Placed p = classify(name, prefix_);
      const auto t = ck_.find(name);
      const bool float_raw =
          t && (t->entry->dtype == Dtype::kBF16 || t->entry->dtype == Dtype::kF16 ||
                t->entry->dtype == Dtype::kF32);
      if (p.place == Place::kMtp || p.place == Place::kVision) continue;
      if (p.place == Place::kLayer && p.kind == "linear_attn.conv1d.weight" && float_raw) continue;
      problems.push_back(fmt::format("{}: {}", name, why));
    }
    if (problems.empty()) return ok_status();
    return unknown_tensors_error(dir(), "colibri-qwen36 (qwen36.c)", problems);
  }

  // A non-expert tensor as F16 under `out`.
  void add_f16(ContainerBuilder& b, std::string_view source, const std::string& out) {
    const auto it = ix_.by_name.find(source);
    if (it != ix_.by_name.end()) {
      b.cast(*it->second, Dtype::kF16, out);
      b.source(it->second->source_name(), "convert", "qwen36.f16");
    } else {  // a 3-D conv kernel: raw float elements
      b.cast_raw(*ck_.find(source), Dtype::kF16, out);
      b.source(source, "convert", "qwen36.f16");
    }
    b.count("residents f16");
  }

  std::uint64_t groups(std::uint64_t cols, std::uint64_t g) const {
    return g ? ceil_div(cols, g) : 1;
  }

  void add_expert(ContainerBuilder& b, std::uint64_t l, const Layer& layer, std::uint64_t e) {
    const bool mixed = opt_.down_bits != 0;
    const QuantRule gu = rule_for(mixed ? 4 : opt_.ebits, opt_.gs);
    const QuantRule down = mixed ? rule_for(opt_.down_bits, opt_.down_gs) : gu;
    std::vector<UnitPiece> pieces;
    for (std::size_t j = 0; j < 3; ++j)
      pieces.push_back({expert_weight(l, layer, e, j), j == 2 ? down : gu});
    const std::uint64_t n = moe_inter_ * hidden_;
    const bool packed = gu.packed();
    const std::uint64_t bytes = mixed ? 2 * n : packed ? 3 * n / 2 : 3 * n;
    const std::uint64_t scales =
        2 * moe_inter_ * groups(hidden_, gu.group) + hidden_ * groups(moe_inter_, down.group);
    const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", l, e);
    b.quant(std::move(pieces), p + "merged_weight", packed || mixed ? Dtype::kU8 : Dtype::kI8,
            {bytes}, p + "qs", {scales});
    for (std::size_t j = 0; j < 3; ++j) {
      b.source(expert_weight(l, layer, e, j)->source_name(), layer.fused ? "unfuse" : "merge",
               "qwen36.expert");
    }
    b.count(mixed ? fmt::format("experts int4 (gate, up) + int{} down, merged", opt_.down_bits)
                  : fmt::format("experts {}-bit {}, merged", opt_.ebits,
                                packed ? "two's-complement nibbles" : "int8"));
  }

  void build() {
    ContainerBuilder b(plan_);
    b.file("model-globals.safetensors");
    for (const auto& [out, src] : globals_) add_f16(b, src, out);
    for (std::uint64_t l = 0; l < layer_types_.size(); ++l) {
      const Layer& layer = layers_.at(l);
      b.file(fmt::format("model-{:05d}.safetensors", l));
      for (const auto& [kind, src] : layer.tensors) {
        if (kind.starts_with("mlp.experts.")) continue;
        add_f16(b, src, fmt::format("model.layers.{}.{}", l, kind));
      }
      for (std::uint64_t e = 0; e < experts_; ++e) add_expert(b, l, layer, e);
    }
    if (mtp_) plan_.counts["mtp.* dropped (qwen36.mtp_not_converted)"] = mtp_;
    if (vision_) plan_.counts["vision dropped (qwen36.vision_not_converted)"] = vision_;
    b.sort_files_for_alignment();
    plan_.side_files.push_back({"config.json", python_json(text_, 1), ""});
    plan_.side_files.push_back({"config.hf.json", "", (fs::path(dir()) / "config.json").string()});
    copy_side_files(plan_, dir(), {"tokenizer.json"});
    add_generation_config(plan_, dir(), full_);
    plan_.side_files.push_back({"qwen36_meta.json", python_json(meta(), 2), ""});
  }

  // The first full-attention layer's source tensor `kind`, if any.
  std::optional<TensorRef> attention_tensor(std::string_view kind) const {
    for (std::uint64_t l = 0; l < layer_types_.size(); ++l) {
      if (layer_types_[l] != "full_attention") continue;
      const auto& t = layers_.at(l).tensors;
      const auto it = t.find(std::string(kind));
      return it == t.end() ? std::nullopt : ck_.find(it->second);
    }
    return std::nullopt;
  }

  Json meta() const {
    const Json rope = text_.contains("rope_parameters") && text_["rope_parameters"].is_object()
                          ? text_["rope_parameters"]
                          : Json::object();
    Json m;
    m["model_type"] = full_.contains("model_type") ? full_["model_type"] : Json();
    m["hidden"] = hidden_;
    m["n_layers"] = n_layers_;
    m["n_active"] = layer_types_.size();
    m["layer_types"] = layer_types_;
    m["num_experts"] = experts_;
    m["topk"] = json_int(text_, "num_experts_per_tok", 0);
    m["moe_inter"] = moe_inter_;
    const bool shared = has_shared_expert();
    m["shared_inter"] = shared ? json_int(text_, "shared_expert_intermediate_size",
                                          static_cast<std::int64_t>(moe_inter_))
                               : 0;
    m["rms_eps"] = json_float(text_, "rms_norm_eps", 1e-6);
    m["ebits"] = opt_.ebits;
    m["scoring_func"] = text_.contains("scoring_func") ? text_["scoring_func"] : Json("softmax");
    m["n_group"] = json_int(text_, "n_group", 1);
    m["topk_group"] = json_int(text_, "topk_group", 1);
    m["norm_topk_prob"] = truthy(text_, "norm_topk_prob");
    m["attn_output_gate"] = truthy(text_, "attn_output_gate");
    // qwen3_moe keeps rope_theta at the top level and rotates the whole head.
    m["rope_theta"] = json_float(rope, "rope_theta", json_float(text_, "rope_theta", 10000000.0));
    m["mrope_section"] =
        rope.contains("mrope_section") ? rope["mrope_section"] : Json({16, 16, 16});
    m["partial_rotary_factor"] =
        json_float(text_, "partial_rotary_factor", plan_.family == "qwen3_moe" ? 1.0 : 0.25);
    bool full_attention = false;
    for (const auto& t : layer_types_) full_attention |= t == "full_attention";
    if (full_attention) {
      const std::int64_t qh = json_int(text_, "num_attention_heads", 0);
      const std::int64_t kvh = json_int(text_, "num_key_value_heads", 0);
      m["q_heads"] = qh;
      m["kv_heads"] = kvh;
      std::optional<std::int64_t> qhd, khd, rope_dim;
      const auto rows = [&](const char* kind) -> std::optional<std::int64_t> {
        const auto t = attention_tensor(kind);
        if (!t || t->entry->shape.empty()) return std::nullopt;
        return static_cast<std::int64_t>(t->entry->shape[0]);
      };
      if (const auto q = rows("self_attn.q_proj.weight"); q && qh) {
        qhd = *q / qh;
        m["q_head_dim"] = *qhd;
      }
      if (const auto k = rows("self_attn.k_proj.weight"); k && kvh) {
        khd = *k / kvh;
        m["k_head_dim"] = *khd;
      }
      if (const auto v = rows("self_attn.v_proj.weight"); v && kvh) m["v_head_dim"] = *v / kvh;
      if (const auto o = attention_tensor("self_attn.o_proj.weight");
          o && o->entry->shape.size() == 2) {
        m["o_in"] = o->entry->shape[1];
      }
      if (const auto n = rows("self_attn.q_norm.weight")) {
        rope_dim = *n;
        m["qk_rope_head_dim"] = *n;
      }
      m["expert_gs"] = opt_.gs;
      if (opt_.down_bits) {
        m["expert_down_bits"] = opt_.down_bits;
        m["expert_down_gs"] = opt_.down_gs;
      }
      const std::int64_t head_dim = khd ? *khd : qhd ? *qhd : 256;
      m["head_dim"] = head_dim;
      m["rope_dim"] = rope_dim ? *rope_dim : head_dim / 4;
    }
    const auto dn = [&](const char* a, const char* b) {
      return json_int(text_, a, json_int(text_, b, 0));
    };
    const std::int64_t vh = dn("linear_num_value_heads", "num_value_heads");
    const std::int64_t kh = dn("linear_num_key_heads", "num_key_heads");
    const std::int64_t kd = dn("linear_key_head_dim", "key_head_dim");
    const std::int64_t vd = dn("linear_value_head_dim", "value_head_dim");
    m["dn_vheads"] = vh;
    m["dn_kheads"] = kh;
    m["dn_kdim"] = kd;
    m["dn_vdim"] = vd;
    m["dn_convk"] = dn("linear_conv_kernel_dim", "conv_kernel_size");
    m["dn_conv_dim"] = kh * kd * 2 + vh * vd;
    if (plan_.family == "qwen3_moe") {
      // Keys qwen36.c reads that convert_qwen36.py never writes: Qwen3-MoE's RMSNorm is x * w
      // (not the hybrid's x * (1 + w)), and it has q/k norms and no attention bias.
      m["zero_centered_norms"] = false;
      m["has_qk_norm"] = true;
      m["has_bias"] = false;
    }
    return m;
  }

  bool has_shared_expert() const {
    for (const auto& [l, layer] : layers_) {
      if (layer.tensors.contains("mlp.shared_expert.gate_proj.weight")) return true;
    }
    return false;
  }

  const Checkpoint& ck_;
  const ContainerOptions& o_;
  Options opt_;
  Json full_, text_;
  ContainerPlan plan_;
  WeightIndex ix_;
  std::string prefix_ = "model.";
  std::map<std::string, std::string_view> globals_;  ///< output name -> source name
  std::map<std::uint64_t, Layer> layers_;
  std::vector<std::string> layer_types_;
  std::uint64_t hidden_ = 0, experts_ = 0, vocab_ = 0, n_layers_ = 0, moe_inter_ = 0;
  std::size_t mtp_ = 0, vision_ = 0;
};

}  // namespace

Result<ContainerPlan> plan_qwen36(const Checkpoint& ck, const ContainerOptions& o) {
  return Qwen36Planner(ck, o).run();
}

}  // namespace qrepack
