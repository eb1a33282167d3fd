// colibri-qwen38-int4: Qwen3.8-Flash-Next's experts-only int4 overlay (convert_qwen38_int4.py;
// reference/colibri-engines.md §1.5). The runtime runs the official FP8 checkpoint as it is
// and, with Q38_INT4_SNAP=<overlay>, reads each routed expert from the overlay instead: one
// U8 merged_weight [gate | up | down, each [O, I/2] row-major, offset-binary nibbles, low =
// even column] and one F32 qs [gate | up | down scales, each [O][I/gs]] per expert. Scales are
// max(amax / 7, 1e-8) per group of gs (default 64) as one f32 division; codes round half to
// even. One file per MoE layer (model-LLLLL.safetensors) and per MTP layer
// (model-mtpNN.safetensors), no metadata; F32 scales first, then the nibbles, each by name.
// The sources: the BF16 release (fused gate_up_proj [E, 2I, H], gate rows first, and
// down_proj [E, H, I]) or the FP8 release (per-expert F8_E4M3 with BF16 128x128
// weight_scale_inv). Every other tensor stays in the official directory: each name must be
// one the overlay leaves there, or the run stops.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

#include "qrepack/core/checked.h"
#include "remote/paths.h"
#include "targets/container/check_load_parts.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using namespace std::string_view_literals;

constexpr std::string_view kRule = "qwen38.config";
constexpr float kScaleFloor = 1e-8f;
constexpr std::array kProjections = {"gate_proj"sv, "up_proj"sv, "down_proj"sv};

// What the overlay leaves in the official directory, as substrings (the upstream tool's list:
// embeddings, hyper-connections, DeltaNet and sparse attention, router, shared expert, PLE,
// vision, the MTP head's own projections, every norm).
constexpr std::array kLeftInPlace = {
    "lm_head.weight"sv,
    "embed_tokens.weight"sv,
    "hyper_connection_mixer."sv,
    "attn_hyper_connection."sv,
    "mlp_hyper_connection."sv,
    "linear_attn."sv,
    "mlp.gate.weight"sv,
    "mlp.shared_expert."sv,
    "mlp.shared_expert_gate.weight"sv,
    ".ple."sv,
    "self_attn."sv,
    "model.visual."sv,
    "mtp.fc_embedding.weight"sv,
    "mtp.fc_hidden.weight"sv,
    "mtp.pre_fc_norm_embedding.weight"sv,
    "mtp.pre_fc_norm_hidden.weight"sv,
    "norm.weight"sv,
};

// A routed-expert tensor: fused (<unit>.mlp.experts.{gate_up_proj,down_proj}) or one
// projection of one expert (<unit>.mlp.experts.<e>.<proj>.weight).
struct ExpertName {
  std::string unit;         ///< "model.language_model.layers.3", "mtp.layers.0"
  bool mtp = false;         ///< unit under mtp.layers
  std::uint64_t index = 0;  ///< the unit's layer index
  bool fused = false;
  std::uint64_t expert = 0;  ///< split only
  std::size_t proj = 0;      ///< split: 0 gate, 1 up, 2 down; fused: 0 gate_up, 2 down
};

enum class NameKind : std::uint8_t { kExpert, kLeft, kBadUnit, kUnknown };

NameKind classify(std::string_view n, ExpertName& e) {
  constexpr std::string_view mid = ".mlp.experts.";
  const std::size_t at = n.find(mid);
  if (at != std::string_view::npos) {
    const std::string_view unit = n.substr(0, at), rest = n.substr(at + mid.size());
    bool known = false;
    if (rest == "gate_up_proj" || rest == "down_proj") {
      e.fused = true;
      e.proj = rest == "gate_up_proj" ? 0 : 2;
      known = true;
    } else if (const std::size_t dot = rest.find('.'); dot != std::string_view::npos) {
      const auto x = name_index(rest.substr(0, dot));
      const std::string_view p = rest.substr(dot + 1);
      for (std::size_t k = 0; k < kProjections.size() && x; ++k) {
        if (p == fmt::format("{}.weight", kProjections[k])) {
          e.expert = *x;
          e.proj = k;
          known = true;
        }
      }
    }
    if (known) {
      for (const std::string_view stack :
           {"model.language_model.layers."sv, "model.layers."sv, "mtp.layers."sv}) {
        if (!unit.starts_with(stack)) continue;
        const auto l = name_index(unit.substr(stack.size()));
        if (!l) break;
        e.unit = std::string(unit);
        e.mtp = stack == "mtp.layers.";
        e.index = *l;
        return NameKind::kExpert;
      }
      return NameKind::kBadUnit;
    }
  }
  for (const std::string_view k : kLeftInPlace) {
    if (n.find(k) != std::string_view::npos) return NameKind::kLeft;
  }
  return NameKind::kUnknown;
}

struct Geometry {
  std::uint64_t layers, hidden, experts, inter, group;
};

Result<Geometry> read_geometry(const nlohmann::ordered_json& config, const std::string& dir,
                               std::uint64_t group) {
  const auto& text = config.contains("text_config") && config["text_config"].is_object()
                         ? config["text_config"]
                         : config;
  // A key the text section lacks is read from the top level, as the upstream tool does.
  const auto dim = [&](const char* key) -> Result<std::uint64_t> {
    return config_dim(text.contains(key) ? text : config, key, dir, kRule);
  };
  Geometry g{};
  QR_ASSIGN_OR_RETURN(layers, dim("num_hidden_layers"));
  QR_ASSIGN_OR_RETURN(hidden, dim("hidden_size"));
  QR_ASSIGN_OR_RETURN(experts, dim("num_experts"));
  QR_ASSIGN_OR_RETURN(inter, dim("moe_intermediate_size"));
  g = {layers, hidden, experts, inter, group};
  if ((layers + 64) * experts * 3 > kMaxModelWeights) {
    return config_key_error(dir,
                            fmt::format("{} layers x {} experts is over the cap of {} weights",
                                        layers, experts, kMaxModelWeights),
                            "config.max_weights");
  }
  // The runtime derives the group size from the scales' byte count and needs whole groups
  // in both widths; odd widths cannot be packed two codes a byte.
  if (hidden % group != 0 || inter % group != 0) {
    return config_key_error(
        dir,
        fmt::format("hidden_size {} and moe_intermediate_size {} must be multiples of the group "
                    "size {} (the runtime reads whole groups only)",
                    hidden, inter, group),
        "qwen38.group");
  }
  return g;
}

Result<std::uint64_t> parse_group(const ContainerOptions& o) {
  constexpr std::string_view p = "int4-g";
  std::uint64_t g = 0;
  const std::string_view s = o.scheme;
  const bool ok =
      s.starts_with(p) &&
      std::from_chars(s.data() + p.size(), s.data() + s.size(), g).ptr == s.data() + s.size();
  if (!ok || g < 8 || g > 4096 || g % 2 != 0 || o.expert_bits || o.down_bits || o.down_group) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-qwen38-int4 writes int4-g<N> experts (N even, 8 "
                             "to 4096; the runtime's default 64), not --to {}{}",
                             o.scheme, o.expert_bits || o.down_bits ? " with --bits" : ""))
        .with_rule("target.scheme");
  }
  return g;
}

struct Unit {
  bool mtp = false;
  std::uint64_t index = 0;
  std::string prefix;  ///< the unit as its source names it
  bool fused = false, split = false;
};

class Planner {
 public:
  Planner(const Checkpoint& ck, ContainerPlan& plan, const WeightIndex& ix, const Geometry& g)
      : ck_(ck), plan_(plan), ix_(ix), g_(g) {}

  Status classify_all() {
    std::unordered_set<std::string_view> consumed;
    for (const auto& [sidecar, weight] : plan_.recognized->consumed) consumed.insert(sidecar);
    ContainerBuilder b(plan_);
    for (const std::uint32_t i : ck_.by_name()) {
      const std::string_view n = ck_.tensors()[i].entry->name;
      if (consumed.contains(n)) continue;
      ExpertName e;
      switch (classify(n, e)) {
        case NameKind::kLeft:
          b.source(n, "leave", "qwen38.official_directory");
          ++left_;
          break;
        case NameKind::kBadUnit:
          problems_.push_back(
              fmt::format("{}: a routed expert outside model.language_model."
                          "layers.N, model.layers.N and mtp.layers.N",
                          n));
          break;
        case NameKind::kUnknown:
          problems_.emplace_back(n);
          break;
        case NameKind::kExpert:
          add_expert_name(e, n);
          break;
      }
    }
    check_units();
    if (!problems_.empty()) {
      std::sort(problems_.begin(), problems_.end());
      return unknown_tensors_error(ck_.directory(), "colibri-qwen38-int4", problems_);
    }
    return ok_status();
  }

  void build() {
    ContainerBuilder b(plan_);
    QuantRule rule;
    rule.bits = 4;
    rule.group = g_.group;
    rule.amax_floor = 0.0f;
    rule.scale_floor = kScaleFloor;
    const std::uint64_t n = g_.inter * g_.hidden;
    const std::uint64_t scales =
        2 * g_.inter * (g_.hidden / g_.group) + g_.hidden * (g_.inter / g_.group);
    for (const auto& [key, u] : units_) {
      b.file(u.mtp ? fmt::format("model-mtp{:02d}.safetensors", u.index)
                   : fmt::format("model-{:05d}.safetensors", u.index));
      // Experts by name as text (experts.1 < experts.10 < experts.2), as the reference
      // writer orders them within each dtype.
      std::vector<std::pair<std::string, std::uint64_t>> order;
      for (std::uint64_t e = 0; e < g_.experts; ++e) order.emplace_back(std::to_string(e), e);
      std::sort(order.begin(), order.end());
      for (const auto& [text, e] : order) {
        std::vector<UnitPiece> pieces;
        for (std::size_t j = 0; j < 3; ++j) pieces.push_back({weight(u, e, j), rule});
        const std::string p = fmt::format("{}.mlp.experts.{}.", u.prefix, text);
        b.quant(std::move(pieces), p + "merged_weight", Dtype::kU8, {3 * n / 2}, p + "qs",
                {scales});
        for (std::size_t j = 0; j < 3; ++j) {
          b.source(weight(u, e, j)->source_name(), u.fused ? "unfuse" : "merge",
                   "qwen38.expert_int4");
        }
      }
      b.count(u.mtp ? "MTP layer experts int4 (files)" : "MoE layer experts int4 (files)");
    }
    b.sort_files_for_alignment();
  }

  std::size_t left() const { return left_; }
  std::size_t unit_count() const { return units_.size(); }

 private:
  void add_expert_name(const ExpertName& e, std::string_view n) {
    if (!e.mtp && e.index >= g_.layers) {
      problems_.push_back(
          fmt::format("{}: layer {} is beyond num_hidden_layers {}", n, e.index, g_.layers));
      return;
    }
    if (!e.mtp && !text_prefix_.empty() && !e.unit.starts_with(text_prefix_)) {
      problems_.push_back(fmt::format("{}: the text layers are named under two prefixes", n));
      return;
    }
    if (!e.mtp) text_prefix_ = e.unit.substr(0, e.unit.rfind("layers."));
    Unit& u = units_[{e.mtp, e.index}];
    u.mtp = e.mtp;
    u.index = e.index;
    u.prefix = e.unit;
    (e.fused ? u.fused : u.split) = true;
    if (!e.fused && e.expert >= g_.experts) {
      problems_.push_back(
          fmt::format("{}: expert {} is beyond num_experts {}", n, e.expert, g_.experts));
    }
  }

  // The logical weight of projection j of expert e (fused tensors are recognized as
  // "<stack>layers.L.mlp.experts.e.<proj>.weight" slices).
  const LogicalWeight* weight(const Unit& u, std::uint64_t e, std::size_t j) const {
    const std::string name =
        u.fused ? fmt::format("{}layers.{}.mlp.experts.{}.{}.weight", u.mtp ? "mtp." : "model.",
                              u.index, e, kProjections[j])
                : fmt::format("{}.mlp.experts.{}.{}.weight", u.prefix, e, kProjections[j]);
    const auto it = ix_.by_name.find(name);
    return it == ix_.by_name.end() ? nullptr : it->second;
  }

  void check_units() {
    for (std::uint64_t l = 0; l < g_.layers; ++l) {
      if (!units_.contains({false, l})) {
        problems_.push_back(
            fmt::format("layer {} has no routed experts (every layer of "
                        "Qwen3.8-Flash-Next is MoE)",
                        l));
      }
    }
    for (const auto& [key, u] : units_) {
      if (u.fused && u.split) {
        problems_.push_back(fmt::format("{}: both fused and per-expert tensors", u.prefix));
        continue;
      }
      for (std::uint64_t e = 0; e < g_.experts; ++e) {
        for (std::size_t j = 0; j < 3; ++j) check_projection(u, e, j);
      }
    }
  }

  void check_projection(const Unit& u, std::uint64_t e, std::size_t j) {
    const std::vector<std::uint64_t> want =
        j == 2 ? std::vector{g_.hidden, g_.inter} : std::vector{g_.inter, g_.hidden};
    const LogicalWeight* w = weight(u, e, j);
    if (!w) {
      problems_.push_back(
          fmt::format("missing {}.mlp.experts.{}.{}.weight", u.prefix, e, kProjections[j]));
    } else if (std::vector<std::uint64_t>(w->shape) != want) {
      problems_.push_back(fmt::format("{}: shape [{}], the config implies [{}]", w->source_name(),
                                      fmt::join(w->shape, ", "), fmt::join(want, ", ")));
    }
  }

  const Checkpoint& ck_;
  ContainerPlan& plan_;
  const WeightIndex& ix_;
  Geometry g_;
  std::map<std::pair<bool, std::uint64_t>, Unit> units_;  // text layers first, then MTP
  std::string text_prefix_;
  std::vector<std::string> problems_;
  std::size_t left_ = 0;
};

std::string meta_json(const Geometry& g, std::size_t units, const std::string& source,
                      bool remote) {
  nlohmann::ordered_json m;
  m["family"] = "qwen38";
  m["source_repo"] = source;
  m["source_revision"] = remote ? "hub" : "local";
  m["expert_gs"] = g.group;
  m["expert_fmt"] = 4;
  m["expert_bits"] = 4;
  m["nibble_encoding"] = "offset-binary (stored u = q + 8, decoded u - 8)";
  m["scale_layout"] = "[O][I/gs] row-major, gate||up||down concatenated per expert";
  m["scale_floor"] = 1e-8;
  m["hidden_size"] = g.hidden;
  m["moe_intermediate_size"] = g.inter;
  m["num_experts"] = g.experts;
  m["num_hidden_layers"] = g.layers;
  m["moe_units"] = units;
  m["experts_total"] = units * g.experts;
  m["bytes_per_expert"] = 3 * g.inter * g.hidden / 2 +
                          4 * (2 * g.inter * (g.hidden / g.group) + g.hidden * (g.inter / g.group));
  m["contains"] =  // the tool's words (the runtime mounts the overlay via Q38_INT4_SNAP)
      "routed experts only; dense, PLE, vision and tokenizer stay in the FP8 checkpoint, mounted "
      "alongside via st_init_multi";
  return python_json(m, 2);
}

}  // namespace

Result<ContainerPlan> plan_qwen38_int4(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  QR_ASSIGN_OR_RETURN(group, parse_group(o));
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-qwen38-int4"));
  const std::string top = json_string(config, "model_type", "");
  if (top != "qwen4_exp" && top != "qwen4_exp_text") {
    return config_key_error(
        dir,
        fmt::format("model_type \"{}\" is not Qwen3.8-Flash-Next's (qwen4_exp)", top.substr(0, 64)),
        kRule);
  }
  QR_ASSIGN_OR_RETURN(g, read_geometry(config, dir, group));
  ContainerPlan plan;
  std::vector<std::string> problems;
  QR_ASSIGN_OR_RETURN(ix, start_plan(ck, plan, "qwen4_exp", config, "qwen4_exp", problems));
  // Tensors recognition leaves unclaimed (3-D convolution kernels, stray scales) are checked
  // by name like every other: left in place, or unknown.
  Planner p(ck, plan, ix, g);
  QR_TRY(p.classify_all());
  p.build();
  plan.counts["tensors left in the official directory"] = p.left();
  std::error_code ec;
  const bool remote = remote::is_remote_path(dir);
  plan.side_files.push_back(
      {"qwen38_meta.json",
       meta_json(g, p.unit_count(), remote ? dir : fs::canonical(dir, ec).string(), remote), "",
       ""});
  return plan;
}

Status check_qwen38_int4(Loader& l, const Json& meta) {
  auto& r = l.report();
  const std::uint64_t h = need(meta, "hidden_size", r), i = need(meta, "moe_intermediate_size", r);
  const std::uint64_t e = need(meta, "num_experts", r), layers = need(meta, "num_hidden_layers", r);
  if (!r.unloadable.empty()) return ok_status();
  const std::string prefix =
      l.ck().find("model.language_model.layers.0.mlp.experts.0.merged_weight")
          ? "model.language_model"
          : "model";
  if (layers * e > kMaxModelWeights) {
    r.unloadable.push_back("qwen38_meta.json: more experts than qrepack checks");
    return ok_status();
  }
  for (std::uint64_t L = 0; L < layers; ++L) {
    for (std::uint64_t x = 0; x < e; ++x) {
      const std::string p = fmt::format("{}.layers.{}.mlp.experts.{}.", prefix, L, x);
      const auto m = l.get(p + "merged_weight");
      const auto q = l.get(p + "qs");
      if (!m || !q) continue;
      const std::uint64_t qb = q->entry->byte_size(), mb = m->entry->byte_size();
      // The runtime's group size: 12 I H / qs bytes, whole groups in both widths.
      const std::uint64_t gs = qb ? 12 * i * h / qb : 0;
      const bool gs_ok = gs >= 8 && gs <= std::min(i, h) && 12 * i * h % qb == 0 && h % gs == 0 &&
                         i % gs == 0 && qb == (2 * i * (h / gs) + h * (i / gs)) * 4;
      if (m->entry->dtype != Dtype::kU8 || q->entry->dtype != Dtype::kF32) {
        l.bad(p + "merged_weight", "merged_weight must be U8 and qs F32");
      } else if (!gs_ok) {
        l.bad(p + "qs", fmt::format("{} bytes imply no whole group size", qb));
      } else if (mb != 3 * i * h / 2) {
        l.bad(p + "merged_weight", fmt::format("{} bytes, not 3 I H / 2 = {}", mb, 3 * i * h / 2));
      } else {
        ++r.checked;
      }
    }
  }
  return ok_status();
}

}  // namespace qrepack
