// colibri-glm53: the GLM-5.3-Flash runtime's container (upstream convert_glm53.py;
// reference/colibri-engines.md §1.3). Names are kept as stored (the model.language_model.
// prefix stays). Each tensor's disposition follows from its name alone, first match wins:
//   <w>_scale_inv                                   consumed by its FP8 weight
//   contains .mlp.experts. and ends .weight         routed expert: int4-g64 (fmt 4), <w> U8
//                                                   [O*I/2] + <w>.qs F32 [O*I/64]
//   one of kKeepF32 as a substring                  F32 (mHC, DeltaNet decay, norms, biases)
//   one of kKnownBf16 as a substring                BF16 (round to nearest even)
//   anything else                                   refused before any output
// FP8 sources are dequantized (e4m3 times the 128x128 block scale, f32) first. int4-g64: per
// row and group of 64 s = max(amax / 7, 1e-8) (f32 division), q = rint(x / s) clamped to
// [-8, 7], nibble q + 8, element 2k in the low nibble. One output per source shard with the
// shard's file name and metadata {"format": "pt"}, tensors F32 first, then BF16, then U8, each
// by name. The side files are copied; a missing generation_config.json is written from
// config.json's eos ids (#1478).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <numeric>
#include <set>
#include <unordered_set>

#include "io/fs_util.h"
#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"
#include "targets/container/planners.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using namespace std::string_view_literals;

constexpr std::uint64_t kGroup = 64;  // the runtime's expert group size (hard-coded there)
constexpr float kScaleFloor = 1e-8f;

constexpr std::array kKeepF32 = {
    "hc_attn_base"sv,
    "hc_attn_fn"sv,
    "hc_attn_scale"sv,
    "hc_ffn_base"sv,
    "hc_ffn_fn"sv,
    "hc_ffn_scale"sv,
    "dt_bias"sv,
    "A_log"sv,
    "e_score_correction_bias"sv,
    "index_kpool_compress_ape"sv,
    "norm.weight"sv,
    "norm.bias"sv,
    "layernorm.weight"sv,
    "o_norm.weight"sv,
    ".bias"sv,
};

constexpr std::array kKnownBf16 = {
    "embed_tokens.weight"sv,
    "lm_head.weight"sv,
    "mlp.gate.weight"sv,
    "mlp.gate_proj.weight"sv,
    "mlp.up_proj.weight"sv,
    "mlp.down_proj.weight"sv,
    "shared_experts.gate_proj.weight"sv,
    "shared_experts.up_proj.weight"sv,
    "shared_experts.down_proj.weight"sv,
    "q_proj.weight"sv,
    "k_proj.weight"sv,
    "v_proj.weight"sv,
    "o_proj.weight"sv,
    "q_a_proj.weight"sv,
    "q_b_proj.weight"sv,
    "kv_a_proj_with_mqa.weight"sv,
    "kv_b_proj.weight"sv,
    "q_conv1d.weight"sv,
    "k_conv1d.weight"sv,
    "v_conv1d.weight"sv,
    "f_a_proj.weight"sv,
    "f_b_proj.weight"sv,
    "b_proj.weight"sv,
    "g_a_proj.weight"sv,
    "g_b_proj.weight"sv,
    "indexer.wq_b.weight"sv,
    "indexer.wk.weight"sv,
    "indexer.weights_proj.weight"sv,
    "index_kpool_compress_gate"sv,
    "eh_proj.weight"sv,
    "visual.patch_embed.proj.weight"sv,
    "visual.downsample.weight"sv,
    "visual.merger.proj.weight"sv,
    "visual.merger.gate_proj.weight"sv,
    "visual.merger.up_proj.weight"sv,
    "visual.merger.down_proj.weight"sv,
    "attn.qkv.weight"sv,
    "attn.proj.weight"sv,
    "blocks."sv,
    "post_layernorm.weight"sv,
};

enum class Kind : std::uint8_t { kExpert, kF32, kBf16, kUnknown };

Kind classify(std::string_view n) {
  if (n.find(".mlp.experts.") != std::string_view::npos && n.ends_with(".weight")) {
    return Kind::kExpert;
  }
  const auto any = [n](const auto& list) {
    return std::any_of(list.begin(), list.end(),
                       [n](std::string_view k) { return n.find(k) != std::string_view::npos; });
  };
  if (any(kKeepF32)) return Kind::kF32;
  if (any(kKnownBf16)) return Kind::kBf16;
  return Kind::kUnknown;
}

struct Dims {
  std::uint64_t hidden, inter, experts;
};

Result<Dims> read_dims(const nlohmann::ordered_json& config, const std::string& dir) {
  const auto& text = config.contains("text_config") && config["text_config"].is_object()
                         ? config["text_config"]
                         : config;
  constexpr std::string_view rule = "glm53.config";
  QR_ASSIGN_OR_RETURN(hidden, config_dim(text, "hidden_size", dir, rule));
  QR_ASSIGN_OR_RETURN(inter, config_dim(text, "moe_intermediate_size", dir, rule));
  QR_ASSIGN_OR_RETURN(experts, config_dim(text, "n_routed_experts", dir, rule));
  // The runtime streams experts in whole groups of 64 columns (its group size is fixed).
  if (hidden % kGroup != 0 || inter % kGroup != 0) {
    return config_key_error(dir,
                            fmt::format("hidden_size {} and moe_intermediate_size {} must be "
                                        "multiples of 64 (glm53.c reads int4 experts in groups "
                                        "of 64)",
                                        hidden, inter),
                            "glm53.group");
  }
  return Dims{hidden, inter, experts};
}

// The eos ids for a synthesized generation_config.json: an int, or a non-empty list of ints,
// from the top level first, then text_config (as the upstream tool reads them, #1478).
std::optional<nlohmann::ordered_json> eos_ids(const nlohmann::ordered_json& config) {
  for (const auto* section :
       {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!section || !section->is_object() || !section->contains("eos_token_id")) continue;
    const auto& e = (*section)["eos_token_id"];
    if (e.is_number_integer() || e.is_boolean()) return nlohmann::ordered_json::array({e});
    if (e.is_array() && !e.empty() && std::all_of(e.begin(), e.end(), [](const auto& x) {
          return x.is_number_integer() || x.is_boolean();
        })) {
      return e;
    }
  }
  return std::nullopt;
}

void add_side_files(ContainerPlan& plan, const std::string& dir,
                    const nlohmann::ordered_json& config) {
  copy_side_files(plan, dir,
                  {"config.json", "generation_config.json", "tokenizer.json",
                   "tokenizer_config.json", "processor_config.json", "chat_template.jinja"});
  if (path_kind((fs::path(dir) / "generation_config.json").string()) == PathKind::kRegular) return;
  if (const auto ids = eos_ids(config)) {
    nlohmann::ordered_json g;
    g["eos_token_id"] = *ids;
    plan.side_files.push_back({"generation_config.json", python_json(g, 2) + "\n", "", ""});
  }
}

class Planner {
 public:
  Planner(const Checkpoint& ck, ContainerPlan& plan, const WeightIndex& ix, const Dims& d)
      : ck_(ck), plan_(plan), ix_(ix), d_(d), b_(plan) {}

  Status check() {
    std::unordered_set<std::string_view> skip;
    for (const auto& [sidecar, weight] : plan_.recognized->consumed) skip.insert(sidecar);
    for (const auto& [name, rule] : plan_.recognized->dropped) skip.insert(name);
    for (const TensorRef t : ck_.tensors()) {
      const std::string_view n = t.entry->name;
      if (skip.contains(n)) continue;
      const Kind k = classify(n);
      const auto it = ix_.by_name.find(n);
      const LogicalWeight* w = it == ix_.by_name.end() ? nullptr : it->second;
      if (k == Kind::kUnknown) {
        problems_.emplace_back(n);
      } else if (k == Kind::kExpert) {
        check_expert(n, w);
      } else if (!w && !is_float(t.entry->dtype)) {
        problems_.push_back(
            fmt::format("{}: {} {} is neither a float tensor nor a 2-D weight "
                        "qrepack decodes",
                        n, dtype_info(t.entry->dtype).safetensors, fmt::join(t.entry->shape, "x")));
      }
    }
    if (!problems_.empty()) {
      std::sort(problems_.begin(), problems_.end());
      return unknown_tensors_error(ck_.directory(), "colibri-glm53 (glm53.c)", problems_);
    }
    return ok_status();
  }

  void build() {
    std::vector<std::size_t> shards(ck_.shards().size());
    std::iota(shards.begin(), shards.end(), 0);
    const auto file_name = [&](std::size_t s) {
      return fs::path(ck_.shards()[s].path()).filename().string();
    };
    std::sort(shards.begin(), shards.end(),
              [&](std::size_t a, std::size_t c) { return file_name(a) < file_name(c); });
    std::unordered_set<std::string_view> skip;
    for (const auto& [sidecar, weight] : plan_.recognized->consumed) skip.insert(sidecar);
    for (const auto& [name, rule] : plan_.recognized->dropped) skip.insert(name);
    for (const std::size_t s : shards) {
      b_.file(file_name(s), {{"format", "pt"}});
      std::vector<const TensorEntry*> entries;
      for (const TensorEntry& t : ck_.shards()[s].tensors()) entries.push_back(&t);
      std::sort(entries.begin(), entries.end(),
                [](const TensorEntry* a, const TensorEntry* c) { return a->name < c->name; });
      for (const TensorEntry* t : entries) {
        if (!skip.contains(t->name)) add(*ck_.find(t->name));
      }
    }
    // Stable by width: F32 (scales included, by name), then BF16, then U8, as added by name.
    b_.sort_files_for_alignment();
  }

 private:
  void check_expert(std::string_view n, const LogicalWeight* w) {
    if (!w || w->shape.size() != 2) {
      problems_.push_back(fmt::format("{}: a routed expert must be one 2-D matrix", n));
      return;
    }
    const std::uint64_t o = w->shape[0], i = w->shape[1];
    const bool down = n.ends_with(".down_proj.weight");
    const bool fits = down ? (o == d_.hidden && i == d_.inter) : (o == d_.inter && i == d_.hidden);
    if (!fits) {
      problems_.push_back(fmt::format("{}: shape [{}, {}], the config implies [{}, {}]", n, o, i,
                                      down ? d_.hidden : d_.inter, down ? d_.inter : d_.hidden));
    }
  }

  void add(const TensorRef& t) {
    const std::string name(t.entry->name);
    const auto it = ix_.by_name.find(t.entry->name);
    const LogicalWeight* w = it == ix_.by_name.end() ? nullptr : it->second;
    const Kind k = classify(name);
    if (k == Kind::kExpert) {
      QuantRule r;
      r.bits = 4;
      r.group = kGroup;
      r.amax_floor = 0.0f;
      r.scale_floor = kScaleFloor;
      const std::uint64_t o = w->shape[0], i = w->shape[1];
      b_.quant({{w, r}}, name, Dtype::kU8, {o * i / 2}, name + ".qs", {o * (i / kGroup)});
      b_.count("routed experts int4-g64");
      b_.source(w->source_name(), "convert", "glm53.expert_int4");
      return;
    }
    const Dtype want = k == Kind::kF32 ? Dtype::kF32 : Dtype::kBF16;
    const char* rule = k == Kind::kF32 ? "glm53.f32" : "glm53.bf16";
    if (t.entry->dtype == want) {
      b_.copy(t, name);
      b_.count(fmt::format("{} kept as stored", dtype_info(want).safetensors));
      b_.source(name, "keep", rule);
    } else if (w) {
      b_.cast(*w, want, name);
      b_.count(fmt::format("{} from {}", dtype_info(want).safetensors, source_encoding_name(*w)));
      b_.source(w->source_name(), "convert", rule);
    } else {
      b_.cast_raw(t, want, name);
      b_.count(
          fmt::format("{} from {}", dtype_info(want).safetensors, dtype_info(t.entry->dtype).name));
      b_.source(name, "convert", rule);
    }
  }

  const Checkpoint& ck_;
  ContainerPlan& plan_;
  const WeightIndex& ix_;
  Dims d_;
  ContainerBuilder b_;
  std::vector<std::string> problems_;
};

}  // namespace

Result<ContainerPlan> plan_glm53(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  if (o.scheme != "int4-g64" || o.expert_bits || o.down_bits || o.down_group) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-glm53 writes int4-g64 experts only (glm53.c "
                             "streams nothing else; it requantizes the BF16 rest at load), not "
                             "--to {}{}",
                             o.scheme, o.expert_bits || o.down_bits ? " with --bits" : ""))
        .with_rule("target.scheme");
  }
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-glm53"));
  QR_ASSIGN_OR_RETURN(d, read_dims(config, dir));
  ContainerPlan plan;
  std::vector<std::string> unclaimed;  // classified by name below like every tensor
  QR_ASSIGN_OR_RETURN(ix, start_plan(ck, plan, "glm5_next", config, "glm5_next", unclaimed));
  Planner p(ck, plan, ix, d);
  QR_TRY(p.check());
  p.build();
  add_side_files(plan, dir, config);
  return plan;
}

}  // namespace qrepack
