// colibri-qwen38-experts-int4g64: the sidecar Qwen3.8-Flash-Next's runtime finds in
// <snapshot>/experts-int4g64/ (convert_qwen38_experts_int4.py; reference/colibri-engines.md
// §9.2). The snapshot runs as downloaded; with the sidecar complete (Q38_EXPERT_INT4 unset or 1)
// each routed expert of the text layers is read from it instead of the FP8 release:
//   layer-NNN.safetensors  per expert one record, back to back: gate, up, down codes U8
//                          [O, ceil(I/2)] ("planar64-v8": per 64 inputs 32 bytes, byte k = code k
//                          | code k + 32 << 4, offset binary; a tail in pairs), then their scales
//                          F32 [O, ceil(I/64)] (max(amax, 1e-12) / 7, codes rint(w / s) in
//                          [-8, 7]); names <prefix>.layers.L.mlp.experts.E.<proj>.weight(.qs);
//                          compact header, __metadata__ last, data at 4096
//   index.json             format, geometry, record layout, files, done, source fingerprint
// The MTP head's experts and every other tensor stay in the snapshot.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "core/sha256.h"
#include "io/fs_util.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"
#include "targets/container/planners.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using namespace std::string_view_literals;

constexpr std::string_view kRule = "qwen38.sidecar";
constexpr std::uint64_t kGroup = 64, kAlign = 4096;
constexpr std::array kProjections = {"gate_proj"sv, "up_proj"sv, "down_proj"sv};
constexpr const char* kFormat = "colibri.qwen38.experts-int4g64";

struct Geometry {
  std::uint64_t layers = 0, experts = 0, hidden = 0, inter = 0;
  std::string prefix;
  // Rows and columns of projection j.
  std::uint64_t rows(std::size_t j) const { return j == 2 ? hidden : inter; }
  std::uint64_t cols(std::size_t j) const { return j == 2 ? inter : hidden; }
  std::uint64_t code_bytes(std::size_t j) const { return rows(j) * ((cols(j) + 1) / 2); }
  std::uint64_t scale_count(std::size_t j) const { return rows(j) * ceil_div(cols(j), kGroup); }
  std::uint64_t codes() const { return code_bytes(0) + code_bytes(1) + code_bytes(2); }
  std::uint64_t record_bytes() const {
    return codes() + 4 * (scale_count(0) + scale_count(1) + scale_count(2));
  }
};

Error sidecar_error(const std::string& dir, std::string message) {
  return config_key_error(dir, std::move(message), kRule);
}

Result<Geometry> read_geometry(const Checkpoint& ck, const nlohmann::ordered_json& config) {
  const std::string& dir = ck.directory();
  const auto& text = config.contains("text_config") && config["text_config"].is_object()
                         ? config["text_config"]
                         : config;
  const std::string type = json_string(text, "model_type", "");
  if (type != "qwen4_exp_text") {
    return sidecar_error(dir, fmt::format("the text model_type is \"{}\", not Qwen3.8-Flash-Next's "
                                          "qwen4_exp_text",
                                          type.substr(0, 64)));
  }
  Geometry g;
  QR_ASSIGN_OR_RETURN(layers, config_dim(text, "num_hidden_layers", dir, kRule));
  QR_ASSIGN_OR_RETURN(experts, config_dim(text, "num_experts", dir, kRule));
  QR_ASSIGN_OR_RETURN(hidden, config_dim(text, "hidden_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(inter, config_dim(text, "moe_intermediate_size", dir, kRule));
  g.layers = layers, g.experts = experts, g.hidden = hidden, g.inter = inter;
  if (layers * experts * 3 > kMaxModelWeights) {
    return config_key_error(dir,
                            fmt::format("{} layers x {} experts is over the cap of {} weights",
                                        layers, experts, kMaxModelWeights),
                            "config.max_weights");
  }
  if (g.codes() % 4 != 0) {
    return sidecar_error(dir, fmt::format("hidden_size {}, moe_intermediate_size {}: an expert's "
                                          "codes are {} bytes, not a multiple of 4, so its f32 "
                                          "scales could not follow them aligned",
                                          hidden, inter, g.codes()));
  }
  for (const char* p : {"model.language_model", "model"}) {
    if (ck.find(fmt::format("{}.embed_tokens.weight", p))) {
      g.prefix = p;
      return g;
    }
  }
  return sidecar_error(dir,
                       "no model.language_model.embed_tokens.weight or "
                       "model.embed_tokens.weight: not a Qwen3.8 snapshot");
}

class Planner {
 public:
  Planner(const Checkpoint& ck, ContainerPlan& plan, const WeightIndex& ix, Geometry g)
      : ck_(ck), plan_(plan), ix_(ix), g_(std::move(g)) {}

  // Every routed expert of the text layers, per expert or fused, with the config's shapes; every
  // other tensor stays in the snapshot (recorded).
  Status check() {
    const std::string layers = g_.prefix + ".layers.";
    std::vector<std::string> problems;
    // An expert tensor recognition could not read (an F8_E5M2 weight, say) is named as itself.
    for (const auto& [name, why] : ix_.unclaimed) {
      if (name.starts_with(layers) && name.find(".mlp.experts.") != std::string::npos) {
        problems.push_back(fmt::format("{}: {}", name, why));
      }
    }
    for (std::uint64_t l = 0; l < g_.layers; ++l) {
      for (std::uint64_t e = 0; e < g_.experts; ++e) {
        for (std::size_t j = 0; j < 3; ++j) check_weight(l, e, j, problems);
      }
    }
    // A fused tensor of the wrong shape is one problem, not one per expert.
    std::sort(problems.begin(), problems.end());
    problems.erase(std::unique(problems.begin(), problems.end()), problems.end());
    ContainerBuilder b(plan_);
    for (const TensorRef t : ck_.tensors()) {
      const std::string_view n = t.entry->name;
      if (!is_converted(n)) {
        b.source(n, "leave", "qwen38.snapshot");
        ++plan_.counts["tensors left in the snapshot"];
      }
    }
    if (problems.empty()) return ok_status();
    return unknown_tensors_error(ck_.directory(), "colibri-qwen38-experts-int4g64", problems);
  }

  void build() {
    ContainerBuilder b(plan_);
    QuantRule rule;
    rule.bits = 4;
    rule.group = kGroup;
    rule.byte_rows = rule.planar64 = true;  // amax floor 1e-12, x / scale: the defaults
    for (std::uint64_t l = 0; l < g_.layers; ++l) {
      b.file(layer_file(l));
      for (std::uint64_t e = 0; e < g_.experts; ++e) {
        for (std::size_t j = 0; j < 3; ++j) {
          const LogicalWeight* w = weight(l, e, j);
          const std::string name = fmt::format("{}.layers.{}.mlp.experts.{}.{}.weight", g_.prefix,
                                               l, e, kProjections[j]);
          b.quant({{w, rule}}, name, Dtype::kU8, {g_.rows(j), (g_.cols(j) + 1) / 2}, name + ".qs",
                  {g_.rows(j), ceil_div(g_.cols(j), kGroup)});
          b.source(w->source_name(), w->expert ? "unfuse" : "convert", "qwen38.sidecar_int4");
        }
      }
      // Record order: per expert the three codes, then the three scales (quant() added each
      // projection's codes and scales side by side).
      std::vector<std::uint32_t> order;
      for (std::uint32_t e = 0; e < g_.experts; ++e) {
        for (std::uint32_t k : {0u, 2u, 4u, 1u, 3u, 5u}) order.push_back(6 * e + k);
      }
      const auto f = static_cast<std::uint32_t>(plan_.files.size() - 1);
      b.order_file(f, order);
      plan_.files.back().metadata_last = {
          {"format", kFormat}, {"version", "1"}, {"layer", std::to_string(l)}};
      plan_.files.back().data_align = kAlign;
      b.count("layer files (int4-g64 planar64 records)");
    }
  }

  static std::string layer_file(std::uint64_t l) {
    return fmt::format("layer-{:03d}.safetensors", l);
  }

 private:
  // The expert's own tensor first, else the layer's fused one (recognized as the same name).
  const LogicalWeight* weight(std::uint64_t l, std::uint64_t e, std::size_t j) const {
    const auto it = ix_.by_name.find(
        fmt::format("{}.layers.{}.mlp.experts.{}.{}.weight", g_.prefix, l, e, kProjections[j]));
    if (it != ix_.by_name.end()) return it->second;
    // Fused tensors of model.language_model.* are recognized under model.layers.*.
    const auto fused = ix_.by_name.find(
        fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", l, e, kProjections[j]));
    return fused == ix_.by_name.end() || !fused->second->expert ? nullptr : fused->second;
  }

  void check_weight(std::uint64_t l, std::uint64_t e, std::size_t j,
                    std::vector<std::string>& problems) {
    const LogicalWeight* w = weight(l, e, j);
    const std::vector<std::uint64_t> want{g_.rows(j), g_.cols(j)};
    if (!w) {
      problems.push_back(
          fmt::format("layer {} expert {}: no {} (per expert or fused)", l, e, kProjections[j]));
    } else if (std::vector<std::uint64_t>(w->shape) != want) {
      problems.push_back(fmt::format("{}: shape [{}], the config implies [{}]", w->source_name(),
                                     fmt::join(w->shape, ", "), fmt::join(want, ", ")));
    } else {
      converted_.insert(w->source_name());
      for (const TensorRef& s : w->sidecars()) converted_.insert(s.entry->name);
    }
  }

  bool is_converted(std::string_view n) const { return converted_.contains(n); }

  const Checkpoint& ck_;
  ContainerPlan& plan_;
  const WeightIndex& ix_;
  Geometry g_;
  std::set<std::string_view> converted_;
};

// index.json as the tool writes it once every layer is done (json.dump(indent=1) + newline).
Result<std::string> index_json(const Checkpoint& ck, const Geometry& g) {
  const std::string config = (fs::path(ck.directory()) / "config.json").string();
  QR_ASSIGN_OR_RETURN(text, read_small_file(config, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = 1;
  j["complete"] = true;
  j["group_size"] = kGroup;
  j["codes"] = "planar64-v8";
  j["scales"] = "f32-per-64";
  j["layers"] = g.layers;
  j["experts"] = g.experts;
  j["hidden_size"] = g.hidden;
  j["moe_intermediate_size"] = g.inter;
  j["prefix"] = g.prefix;
  j["record_bytes"] = g.record_bytes();
  j["record"] = {"gate codes", "up codes", "down codes", "gate scales", "up scales", "down scales"};
  j["quantizer"] =
      "per 64 inputs: scale = max(absmax, 1e-12)/7 (f32), code = rint(w/scale) clamped to "
      "[-8,7], stored v+8 (tools/convert_qwen36.py quantize_row_grouped)";
  nlohmann::ordered_json files = nlohmann::ordered_json::array(), done = files;
  for (std::uint64_t l = 0; l < g.layers; ++l) {
    files.push_back(Planner::layer_file(l));
    done.push_back(l);
  }
  j["files"] = std::move(files);
  j["done"] = std::move(done);
  // The fingerprint: config.json's bytes and the size of every shard holding an expert tensor
  // (the MTP head's included), by path.
  std::map<std::string, std::uint64_t> shards;
  for (const TensorRef t : ck.tensors()) {
    if (t.entry->name.find(".mlp.experts.") == std::string::npos) continue;
    const auto& s = ck.shards()[t.shard];
    shards.emplace(s.path(), s.header().file_size);
  }
  nlohmann::ordered_json sizes = nlohmann::ordered_json::object();
  for (const auto& [path, size] : shards) sizes[fs::path(path).filename().string()] = size;
  j["source"] = {{"config_sha256",
                  sha256_hex({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()})},
                 {"shards", std::move(sizes)}};
  return python_json(j, 1) + "\n";
}

}  // namespace

Result<ContainerPlan> plan_qwen38_sidecar(const Checkpoint& ck, const ContainerOptions& o) {
  if (o.scheme != "int4-g64" || o.expert_bits || o.down_bits || o.down_group) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-qwen38-experts-int4g64 writes int4-g64 experts "
                             "only (the runtime's one sidecar format), not --to {}{}",
                             o.scheme, o.expert_bits || o.down_bits ? " with --bits" : ""))
        .with_rule("target.scheme");
  }
  QR_ASSIGN_OR_RETURN(config, read_config(ck.directory(), "colibri-qwen38-experts-int4g64"));
  QR_ASSIGN_OR_RETURN(g, read_geometry(ck, config));
  ContainerPlan plan;
  std::vector<std::string> unclaimed;
  QR_ASSIGN_OR_RETURN(ix, start_plan(ck, plan, "qwen4_exp", config, "qwen4_exp", unclaimed));
  Planner p(ck, plan, ix, g);
  QR_TRY(p.check());
  p.build();
  QR_ASSIGN_OR_RETURN(index, index_json(ck, g));
  plan.side_files.push_back({"index.json", std::move(index), "", ""});
  return plan;
}

// What the runtime's loader checks (q38_expert_int4_attach): the index's format and geometry,
// then per expert the six tensors by name, U8 / F32 of the exact shapes, back to back in record
// order from a 4-aligned offset, in the layer's file.
Status check_qwen38_sidecar(Loader& l, const Json& index) {
  auto& r = l.report();
  if (!index.is_object()) {
    r.unloadable.push_back("index.json: missing or not a JSON object");
    return ok_status();
  }
  const auto str = [&](const char* k) {
    return index.contains(k) && index[k].is_string() ? index[k].get<std::string>() : "";
  };
  const auto num = [&](const char* k) { return meta_or(index, k, 0); };
  if (str("format") != kFormat || num("version") != 1 || str("codes") != "planar64-v8" ||
      str("scales") != "f32-per-64" || num("group_size") != kGroup) {
    r.unloadable.push_back(
        "index.json: format, version, codes, scales or group_size is not the "
        "int4-g64 sidecar's");
    return ok_status();
  }
  if (!index.contains("complete") || index["complete"] != true) {
    r.unloadable.push_back("index.json: not complete (the runtime keeps the FP8 experts)");
  }
  Geometry g;
  g.layers = need(index, "layers", r), g.experts = need(index, "experts", r);
  g.hidden = need(index, "hidden_size", r), g.inter = need(index, "moe_intermediate_size", r);
  g.prefix = str("prefix");
  if (!r.unloadable.empty()) return ok_status();
  if (num("record_bytes") != g.record_bytes() || g.codes() % 4 != 0 ||
      g.layers * g.experts > kMaxModelWeights) {
    r.unloadable.push_back("index.json: record_bytes is not the geometry's");
    return ok_status();
  }
  for (std::uint64_t L = 0; L < g.layers; ++L) {
    for (std::uint64_t e = 0; e < g.experts; ++e) {
      std::uint64_t next = 0;
      std::optional<std::uint32_t> shard;
      bool ok = true;
      for (std::size_t k = 0; k < 6 && ok; ++k) {
        const std::size_t j = k % 3;
        const std::string name = fmt::format("{}.layers.{}.mlp.experts.{}.{}.weight{}", g.prefix, L,
                                             e, kProjections[j], k < 3 ? "" : ".qs");
        const auto t = l.get(name);
        const std::vector<std::uint64_t> shape{
            g.rows(j), k < 3 ? (g.cols(j) + 1) / 2 : ceil_div(g.cols(j), kGroup)};
        if (!t) {
          ok = false;
        } else if (t->entry->dtype != (k < 3 ? Dtype::kU8 : Dtype::kF32) ||
                   std::vector<std::uint64_t>(t->entry->shape.begin(), t->entry->shape.end()) !=
                       shape ||
                   (k == 0 && t->entry->begin % 4 != 0) || (k > 0 && t->entry->begin != next) ||
                   (shard && *shard != t->shard) ||
                   fs::path(l.ck().shards()[t->shard].path()).filename() !=
                       Planner::layer_file(L)) {
          l.bad(name, fmt::format("layer {} expert {} is not one int4-g64 record of {} bytes in {}",
                                  L, e, g.record_bytes(), Planner::layer_file(L)));
          ok = false;
        } else {
          next = t->entry->begin + t->entry->byte_size();
          shard = t->shard;
        }
      }
      if (ok) ++r.checked;
    }
  }
  return ok_status();
}

}  // namespace qrepack
