// colibri-qwen36: the Qwen3.5 / 3.6 runtime's container (upstream convert_qwen36.py @ab3caa78
// with its tensor-kind contract qwen36_tensor_kinds.py; reference/colibri-engines.md §1.4, §9.1).
// Families qwen3_5_moe (hybrid Gated DeltaNet + gated attention, text under text_config, names
// under model.language_model.), its dense variant qwen3_5 (no num_experts: mlp.{gate,up,down}_proj
// per layer) and qwen3_moe (every layer full attention, no shared expert).
//   model-globals.safetensors   model.embed_tokens.weight, model.norm.weight, lm_head.weight (F16)
//   model-vision.safetensors    every model.visual.* / visual.* tensor as model.visual.<rest>, F16,
//                               shapes kept (only with a vision_config)
//   model-LLLLL.safetensors     per layer: every non-expert tensor as F16 under model.layers.L.*;
//                               per expert model.layers.L.mlp.experts.E.merged_weight (1-D:
//                               gate | up | down quantized; <= 4 bits two's-complement nibbles,
//                               U8; 5..8 bits I8; --bits down=5..8 a mixed U8 slab) and .qs
//                               (F32 1-D: gate | up | down scales, row-major per group)
//   model-mtp.safetensors       the MTP head: mtp.{fc,norm,pre_fc_norm_*}.weight and
//                               mtp.layers.0.* through the trunk's layer conversion (names kept)
//   config.json (text_config, re-serialized as json.dump(indent=1)), config.hf.json (the
//   source's bytes), tokenizer.json and the release's side files, qwen36_meta.json (the dims
//   qwen36.c reads).
// Every source name is classified by the contract; an unknown one stops the run before any
// output.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

#include "io/fs_util.h"
#include "qrepack/core/checked.h"
#include "qrepack/schemes/scheme.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"
#include "targets/qwen36/qwen36_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

using namespace qwen36;  // the contract, options and config readers (qwen36_contract.h)

// Everything the planner learned about one layer of the checkpoint (a trunk layer or the MTP
// head's).
struct Layer {
  std::map<std::string, std::string_view> tensors;  ///< kind -> source name
  bool fused = false;
};

class Qwen36Planner {
 public:
  Qwen36Planner(const Checkpoint& ck, const ContainerOptions& o) : ck_(ck), o_(o) {}

  Result<ContainerPlan> run() {
    if (!o_.mtp_base.empty()) return run_mtp_only();
    QR_ASSIGN_OR_RETURN(opt, resolve_options(o_));
    opt_ = opt;
    QR_TRY(read_source_config());
    QR_ASSIGN_OR_RETURN(ix, index_weights(ck_, plan_));
    ix_ = std::move(ix);
    QR_TRY(place_tensors());
    QR_TRY(read_dims());
    QR_TRY(check_vision());
    QR_TRY(check_clef_pair());
    QR_TRY(check_layers());
    build();
    return std::move(plan_);
  }

  // --mtp-only --base-container B: SRC's MTP head alone, quantized as B's meta says, into
  // model-mtp.safetensors beside B's meta with mtp_num_hidden_layers 1 and a link to each other
  // file of B (upstream's append_mtp; B is never written).
  Result<ContainerPlan> run_mtp_only() {
    QR_TRY(read_source_config());
    QR_ASSIGN_OR_RETURN(ix, index_weights(ck_, plan_));
    ix_ = std::move(ix);
    QR_TRY(place_tensors(true));
    if (!has_mtp()) {
      return Error(ErrorKind::kUnclaimedTensor,
                   "--mtp-only: the checkpoint has no mtp.* tensors (no MTP head to add)")
          .in_file(dir())
          .with_rule("qwen36.mtp_only");
    }
    QR_TRY(read_dims());
    QR_ASSIGN_OR_RETURN(meta, read_base_meta());
    QR_TRY(check_base_geometry(meta));
    QR_TRY(take_base_scheme(meta));
    std::vector<std::string> problems;
    check_mtp(problems);
    for (const auto& [name, why] : ix_.unclaimed) {
      if (name.starts_with("mtp.")) problems.push_back(fmt::format("{}: {}", name, why));
    }
    if (!problems.empty()) {
      return unknown_tensors_error(dir(), "colibri-qwen36 (qwen36.c)", problems);
    }
    ContainerBuilder b(plan_);
    add_mtp_file(b);
    b.sort_files_for_alignment();
    meta["mtp_num_hidden_layers"] = 1;  // in place, or last when B's meta predates the key
    plan_.side_files.push_back({"qwen36_meta.json", python_json(meta, 2) + "\n", "", ""});
    QR_TRY(link_base_files());
    return std::move(plan_);
  }

 private:
  Status read_source_config() {
    QR_ASSIGN_OR_RETURN(full, read_config(dir(), "colibri-qwen36"));
    full_ = std::move(full);
    text_ = full_.contains("text_config") && full_["text_config"].is_object() ? full_["text_config"]
                                                                              : full_;
    plan_.model_type = json_string(full_, "model_type", json_string(text_, "model_type", ""));
    // Upstream's qwen3_moe rules follow the top-level model_type exactly.
    q3moe_ = json_string(full_, "model_type", "") == "qwen3_moe";
    plan_.family = q3moe_                                        ? "qwen3_moe"
                   : plan_.model_type.starts_with("qwen3_5_moe") ? "qwen3_5_moe"
                                                                 : plan_.model_type;
    return ok_status();
  }

  std::string base_path(const char* name) const { return (fs::path(o_.mtp_base) / name).string(); }

  Result<Json> read_base_meta() const {
    const std::string p = base_path("qwen36_meta.json");
    if (path_kind(p) != PathKind::kRegular) {
      return Error(ErrorKind::kInputNotFound,
                   "--base-container has no qwen36_meta.json: not a colibri-qwen36 container")
          .in_file(p)
          .with_rule("qwen36.mtp_base");
    }
    return read_json_object(p, "qwen36.mtp_base");
  }

  // The head must fit the trunk B was converted from: the config's geometry is B's meta's.
  Status check_base_geometry(const Json& meta) const {
    const std::array<std::pair<const char*, const char*>, 6> pairs = {{
        {"hidden_size", "hidden"},
        {"num_hidden_layers", "n_layers"},
        {"num_experts", "num_experts"},
        {"moe_intermediate_size", "moe_inter"},
        {"num_attention_heads", "q_heads"},
        {"num_key_value_heads", "kv_heads"},
    }};
    for (const auto& [key, field] : pairs) {
      // A dense model has no num_experts / moe_intermediate_size: 0 in the meta.
      const std::int64_t have = json_int(text_, key, 0), base = json_int(meta, field, 0);
      if (have != base) {
        return Error(ErrorKind::kInvalidConfig,
                     fmt::format("the source's {} is {} but the base container's {} is {}: the "
                                 "head belongs to another model",
                                 key, have, field, base))
            .in_file(base_path("qwen36_meta.json"))
            .with_rule("qwen36.mtp_base");
      }
    }
    return ok_status();
  }

  // ebits, expert_gs and the mixed down slab as B's experts have them.
  Status take_base_scheme(const Json& meta) {
    const std::int64_t bits = json_int(meta, "ebits", 0), gs = json_int(meta, "expert_gs", 0);
    const std::int64_t dbits = json_int(meta, "expert_down_bits", 0);
    const std::int64_t dgs = json_int(meta, "expert_down_gs", 0);
    const bool mixed = dbits != 0 && dbits != bits;
    if (bits < 2 || bits > 8 || gs < 0 || dgs < 0 ||
        (mixed && (bits > 4 || dbits < 5 || dbits > 8))) {
      return Error(ErrorKind::kInvalidConfig,
                   fmt::format("ebits {}, expert_gs {}, expert_down_bits {}, expert_down_gs {} "
                               "is no scheme colibri-qwen36 writes",
                               bits, gs, dbits, dgs))
          .in_file(base_path("qwen36_meta.json"))
          .with_rule("qwen36.mtp_base");
    }
    opt_.ebits = static_cast<int>(bits);
    opt_.gs = static_cast<std::uint64_t>(gs);
    opt_.down_bits = mixed ? static_cast<int>(dbits) : 0;
    opt_.down_gs = mixed ? static_cast<std::uint64_t>(dgs) : 0;
    return ok_status();
  }

  // Every other file of B (symbolic links followed) as an absolute link; B's qrepack.json is
  // replaced by this run's.
  Status link_base_files() {
    QR_ASSIGN_OR_RETURN(names, list_directory(o_.mtp_base));
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      if (n == "qwen36_meta.json" || n == "model-mtp.safetensors" || n == "qrepack.json") continue;
      std::error_code ec;
      const fs::path p = fs::path(o_.mtp_base) / n;
      if (!fs::is_regular_file(p, ec)) continue;
      const fs::path target = fs::canonical(p, ec);
      if (ec) {
        return Error(ErrorKind::kIoRead, "cannot resolve the path")
            .in_file(p.string())
            .with_rule("qwen36.mtp_base");
      }
      plan_.side_files.push_back({n, "", "", target.string()});
      ++plan_.counts["files linked to the base container"];
    }
    return ok_status();
  }

  const std::string& dir() const { return ck_.directory(); }

  // `mtp_only`: every tensor but the head's is another run's (recorded, not converted).
  Status place_tensors(bool mtp_only = false) {
    for (const TensorRef t : ck_.tensors()) {
      if (t.entry->name.starts_with("model.language_model.layers."))
        prefix_ = "model.language_model.";
    }
    std::vector<std::string> unknown, twice;
    // Sidecars (FP8 scales) travel with their weights: looked up once each, not per tensor.
    std::unordered_set<std::string_view> consumed;
    for (const auto& [sidecar, weight] : plan_.recognized->consumed) consumed.insert(sidecar);
    for (const std::uint32_t i : ck_.by_name()) {
      const std::string_view n = ck_.tensors()[i].entry->name;
      if (consumed.contains(n)) continue;
      const Placed p = classify(n, prefix_);
      if (mtp_only && p.place != Place::kMtpGlobal && p.place != Place::kMtpLayer &&
          !(p.place == Place::kUnknown && n.starts_with("mtp."))) {
        ContainerBuilder(plan_).source(n, "drop", "qwen36.mtp_only");
        ++plan_.counts["not the MTP head (--mtp-only)"];
        continue;
      }
      switch (p.place) {
        case Place::kUnknown:
          unknown.emplace_back(n);
          break;
        case Place::kMtpGlobal:
          mtp_globals_[p.kind] = n;
          break;
        case Place::kMtpLayer:
          place_kind(mtp_, p.kind, n);
          break;
        case Place::kVision:
          // model.visual.X and visual.X would both become model.visual.X.
          if (!vision_.emplace(p.kind, n).second) twice.push_back("model.visual." + p.kind);
          break;
        case Place::kGlobal:
          globals_[p.kind] = n;
          break;
        case Place::kLayer:
          place_kind(layers_[p.layer], p.kind, n);
          break;
      }
    }
    if (!unknown.empty()) return unknown_tensors_error(dir(), "colibri-qwen36 (qwen36.c)", unknown);
    if (!twice.empty()) {
      return Error(ErrorKind::kUnclaimedTensor,
                   fmt::format("vision tensor {} is in the checkpoint both as model.visual.* and "
                               "as visual.*; qrepack will not choose one",
                               twice.front()))
          .in_file(dir())
          .with_rule("qwen36.vision_duplicate");
    }
    return ok_status();
  }

  static void place_kind(Layer& layer, const std::string& kind, std::string_view name) {
    layer.tensors[kind] = name;
    if (stacked_experts(kind)) layer.fused = true;
  }

  Status config_error(std::string message, std::string_view rule = kRule) const {
    return Error(ErrorKind::kInvalidConfig, std::move(message))
        .in_file((fs::path(dir()) / "config.json").string())
        .with_rule(rule);
  }

  Status read_dims() {
    QR_ASSIGN_OR_RETURN(h, config_dim(text_, "hidden_size", dir(), kRule));
    QR_ASSIGN_OR_RETURN(v, config_dim(text_, "vocab_size", dir(), kRule));
    QR_ASSIGN_OR_RETURN(n, config_dim(text_, "num_hidden_layers", dir(), kRule));
    QR_ASSIGN_OR_RETURN(eps, config_number(text_, "rms_norm_eps", dir(), kRule));
    (void)eps;  // qwen36.c requires it in config.json
    hidden_ = h, vocab_ = v, n_layers_ = n;
    // num_local_experts is accepted for num_experts (and written into config.json as that);
    // neither: the dense variant.
    if (!text_.contains("num_experts") && text_.contains("num_local_experts")) {
      text_["num_experts"] = text_["num_local_experts"];
    }
    if (text_.contains("num_experts") && json_int(text_, "num_experts", 0) != 0) {
      QR_TRY(read_moe_dims());
    } else if (!text_.contains("intermediate_size")) {
      return config_error(
          "a dense model (no num_experts) needs intermediate_size: qwen36.c runs its MLP at that "
          "width");
    } else {
      QR_ASSIGN_OR_RETURN(inter, config_dim(text_, "intermediate_size", dir(), kRule));
      dense_inter_ = inter;
    }
    // qwen36.c's own ranges (its validate_cfg), which also bound the lists checked below.
    if (n > 512 || experts_ > 1024) {
      return config_error(
          fmt::format("num_hidden_layers {} (at most 512) or num_experts {} (at "
                      "most 1024) beyond what qwen36.c loads",
                      n, experts_));
    }
    return read_layer_types();
  }

  Status read_moe_dims() {
    QR_ASSIGN_OR_RETURN(e, config_dim(text_, "num_experts", dir(), kRule));
    QR_ASSIGN_OR_RETURN(k, config_dim(text_, "num_experts_per_tok", dir(), kRule));
    experts_ = e;
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
    return ok_status();
  }

  // layer_types: the config's; else every layer full attention for qwen3_moe, or what each
  // layer's tensors say.
  Status read_layer_types() {
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
      return ok_status();
    }
    for (std::uint64_t l = 0; l < n_layers_; ++l) {
      const auto it = layers_.find(l);
      const bool linear = !q3moe_ && it != layers_.end() &&
                          it->second.tensors.contains("linear_attn.in_proj_qkv.weight");
      layer_types_.push_back(linear ? "linear_attention" : "full_attention");
    }
    return ok_status();
  }

  // The vision tower is converted when the config describes it (vision_config), with every key
  // the meta's "vision" object takes; without one it is dropped, recorded.
  Status check_vision() {
    if (vision_.empty()) return ok_status();
    const bool described = full_.contains("vision_config") && full_["vision_config"].is_object() &&
                           !full_["vision_config"].empty();
    if (!described) return ok_status();
    std::vector<std::string> missing;
    const auto& vc = full_["vision_config"];
    for (const auto& [key, from] : kVisionKeys) {
      if (!vc.contains(from) || !vc[from].is_number_integer()) missing.push_back(from);
    }
    if (!full_.contains("image_token_id") || !full_["image_token_id"].is_number_integer()) {
      missing.push_back("image_token_id (top level)");
    }
    if (missing.empty()) {
      write_vision_ = true;
      return ok_status();
    }
    return config_error(fmt::format("the vision tower is converted with its meta, but "
                                    "vision_config lacks or has a non-integer {}",
                                    fmt::join(missing, ", ")),
                        "qwen36.vision_config");
  }

  // A Clef decision head is the pair joint_head_config.json + joint_head.safetensors.
  Status check_clef_pair() {
    const bool cfg = path_kind((fs::path(dir()) / kClefConfig).string()) == PathKind::kRegular;
    const bool st = path_kind((fs::path(dir()) / kClefWeights).string()) == PathKind::kRegular;
    if (cfg == st) return ok_status();
    return Error(ErrorKind::kInvalidConfig,
                 fmt::format("{} without {}: a Clef decision head needs both files",
                             cfg ? kClefConfig : kClefWeights, cfg ? kClefWeights : kClefConfig))
        .in_file(dir())
        .with_rule("qwen36.clef_pair");
  }

  // The logical weight of the expert projection j of expert e in a layer whose source names
  // start with `stack` ("model.layers.L.", "<prefix>layers.L." or "mtp.layers.0.").
  const LogicalWeight* expert_weight(const std::string& stack, std::uint64_t e,
                                     std::size_t j) const {
    const auto it =
        ix_.by_name.find(fmt::format("{}mlp.experts.{}.{}.weight", stack, e, kProjections[j]));
    return it == ix_.by_name.end() ? nullptr : it->second;
  }
  std::string trunk_stack(std::uint64_t l, const Layer& layer) const {
    return layer.fused ? fmt::format("model.layers.{}.", l)
                       : fmt::format("{}layers.{}.", prefix_, l);
  }

  // The MLP the config implies: a router and every expert (MoE), or the dense projections.
  void check_mlp(const std::string& what, const Layer& layer, const std::string& stack,
                 std::vector<std::string>& problems) const {
    const auto& t = layer.tensors;
    if (experts_ == 0) {
      for (const char* k : {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
        if (!t.contains(k))
          problems.push_back(fmt::format("{} has no {} (a dense model)", what, k));
      }
      for (const auto& [kind, src] : t) {
        if (expert_kind(kind) || kind == "mlp.gate.weight") {
          problems.push_back(
              fmt::format("{}: {} in a model whose config.json has no num_experts", what, src));
        }
      }
      return;
    }
    if (!t.contains("mlp.gate.weight")) {
      problems.push_back(
          fmt::format("{} has no router (a dense MLP: mlp_only_layers or decoder_sparse_step); "
                      "qwen36.c runs every layer of an MoE model through its router and experts",
                      what));
      return;
    }
    for (std::uint64_t e = 0; e < experts_; ++e) {
      for (std::size_t j = 0; j < 3; ++j) {
        const LogicalWeight* w = expert_weight(stack, e, j);
        const std::vector<std::uint64_t> shape =
            j == 2 ? std::vector<std::uint64_t>{hidden_, moe_inter_}
                   : std::vector<std::uint64_t>{moe_inter_, hidden_};
        if (!w) {
          problems.push_back(fmt::format("{} expert {} has no {}", what, e, kProjections[j]));
        } else if (std::vector<std::uint64_t>(w->shape) != shape) {
          problems.push_back(fmt::format("{} expert {} {}: shape [{}] is not [{}]", what, e,
                                         kProjections[j], fmt::join(w->shape, ", "),
                                         fmt::join(shape, ", ")));
        }
      }
    }
  }

  // The MTP head qwen36_mtp.h loads (when mtp.fc.weight is there): fc [H, 2H], its three norms
  // and one full-attention layer with the trunk's MLP.
  void check_mtp(std::vector<std::string>& problems) const {
    if (mtp_globals_.empty() && mtp_.tensors.empty()) return;
    for (std::string_view g : kMtpGlobals) {
      if (!mtp_globals_.contains("mtp." + std::string(g)))
        problems.push_back(fmt::format("the MTP head has no mtp.{}", g));
    }
    if (const auto it = mtp_globals_.find("mtp.fc.weight"); it != mtp_globals_.end()) {
      const std::vector<std::uint64_t> shape = shape_of(it->second);
      if (shape != std::vector<std::uint64_t>{hidden_, 2 * hidden_}) {
        problems.push_back(fmt::format("mtp.fc.weight: shape [{}] is not [{}, {}]",
                                       fmt::join(shape, ", "), hidden_, 2 * hidden_));
      }
    }
    if (!mtp_.tensors.contains("self_attn.q_proj.weight"))
      problems.push_back("the MTP layer mtp.layers.0 has no self_attn.q_proj.weight");
    check_mlp("MTP layer mtp.layers.0", mtp_, "mtp.layers.0.", problems);
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
      check_mlp(fmt::format("layer {}", l), it->second, trunk_stack(l, it->second), problems);
    }
    check_mtp(problems);
    for (const auto& [name, why] : ix_.unclaimed) {
      const Placed p = classify(name, prefix_);
      const auto t = ck_.find(name);
      const bool float_raw =
          t && (t->entry->dtype == Dtype::kBF16 || t->entry->dtype == Dtype::kF16 ||
                t->entry->dtype == Dtype::kF32);
      // Raw float tensors of any rank cast as they are: the conv kernel, the vision tower's
      // 3-D and 5-D ones.
      if (float_raw && (p.place == Place::kVision ||
                        (p.kind == "linear_attn.conv1d.weight" &&
                         (p.place == Place::kLayer || p.place == Place::kMtpLayer)))) {
        continue;
      }
      problems.push_back(fmt::format("{}: {}", name, why));
    }
    if (problems.empty()) return ok_status();
    return unknown_tensors_error(dir(), "colibri-qwen36 (qwen36.c)", problems);
  }

  // A non-expert tensor as F16 under `out`.
  void add_f16(ContainerBuilder& b, std::string_view source, const std::string& out,
               const char* what = "residents f16") {
    const auto it = ix_.by_name.find(source);
    if (it != ix_.by_name.end()) {
      b.cast(*it->second, Dtype::kF16, out);
      b.source(it->second->source_name(), "convert", "qwen36.f16");
    } else {  // a tensor of rank 3 or more: raw float elements
      b.cast_raw(*ck_.find(source), Dtype::kF16, out);
      b.source(source, "convert", "qwen36.f16");
    }
    b.count(what);
  }

  std::uint64_t groups(std::uint64_t cols, std::uint64_t g) const {
    return g ? ceil_div(cols, g) : 1;
  }

  // Expert e of the layer whose sources start with `stack`, written under `out` + "mlp.experts.E.".
  void add_expert(ContainerBuilder& b, const std::string& stack, bool fused, const std::string& out,
                  std::uint64_t e) {
    const bool mixed = opt_.down_bits != 0;
    const QuantRule gu = rule_for(mixed ? 4 : opt_.ebits, opt_.gs);
    const QuantRule down = mixed ? rule_for(opt_.down_bits, opt_.down_gs) : gu;
    std::vector<UnitPiece> pieces;
    for (std::size_t j = 0; j < 3; ++j)
      pieces.push_back({expert_weight(stack, e, j), j == 2 ? down : gu});
    const std::uint64_t n = moe_inter_ * hidden_;
    const bool packed = gu.packed();
    const std::uint64_t bytes = mixed ? 2 * n : packed ? 3 * n / 2 : 3 * n;
    const std::uint64_t scales =
        2 * moe_inter_ * groups(hidden_, gu.group) + hidden_ * groups(moe_inter_, down.group);
    const std::string p = fmt::format("{}mlp.experts.{}.", out, e);
    b.quant(std::move(pieces), p + "merged_weight", packed || mixed ? Dtype::kU8 : Dtype::kI8,
            {bytes}, p + "qs", {scales});
    for (std::size_t j = 0; j < 3; ++j) {
      b.source(expert_weight(stack, e, j)->source_name(), fused ? "unfuse" : "merge",
               "qwen36.expert");
    }
    b.count(mixed ? fmt::format("experts int4 (gate, up) + int{} down, merged", opt_.down_bits)
                  : fmt::format("experts {}-bit {}, merged", opt_.ebits,
                                packed ? "two's-complement nibbles" : "int8"));
  }

  // One layer's tensors under `out` ("model.layers.L." or "mtp.layers.0.").
  void add_layer(ContainerBuilder& b, const Layer& layer, const std::string& stack,
                 const std::string& out, const char* what) {
    for (const auto& [kind, src] : layer.tensors) {
      if (expert_kind(kind)) continue;
      add_f16(b, src, out + kind, what);
    }
    for (std::uint64_t e = 0; e < experts_; ++e) add_expert(b, stack, layer.fused, out, e);
  }

  void build() {
    ContainerBuilder b(plan_);
    b.file("model-globals.safetensors");
    for (const auto& [out, src] : globals_) add_f16(b, src, out);
    if (write_vision_) {
      b.file("model-vision.safetensors");
      for (const auto& [rest, src] : vision_) add_f16(b, src, "model.visual." + rest, "vision f16");
    } else {
      for (const auto& [rest, src] : vision_) {
        b.source(src, "drop", "qwen36.vision_without_config");
        ++plan_.counts["vision dropped: config.json has no vision_config"];
      }
    }
    for (std::uint64_t l = 0; l < layer_types_.size(); ++l) {
      const Layer& layer = layers_.at(l);
      b.file(fmt::format("model-{:05d}.safetensors", l));
      add_layer(b, layer, trunk_stack(l, layer), fmt::format("model.layers.{}.", l),
                "residents f16");
    }
    if (has_mtp()) add_mtp_file(b);
    b.sort_files_for_alignment();
    plan_.side_files.push_back({"config.json", python_json(text_, 1), "", ""});
    plan_.side_files.push_back(
        {"config.hf.json", "", (fs::path(dir()) / "config.json").string(), ""});
    copy_side_files(plan_, dir(),
                    {"tokenizer.json", "chat_template.jinja", "tokenizer_config.json"});
    add_generation_config(plan_, dir(), full_);
    copy_side_files(plan_, dir(), {"preprocessor_config.json", kClefConfig, kClefWeights});
    plan_.side_files.push_back({"qwen36_meta.json", python_json(meta(), 2), "", ""});
  }

  bool has_mtp() const { return !mtp_globals_.empty() || !mtp_.tensors.empty(); }

  void add_mtp_file(ContainerBuilder& b) {
    b.file("model-mtp.safetensors");
    for (const auto& [out, src] : mtp_globals_) add_f16(b, src, out, "MTP head f16");
    add_layer(b, mtp_, "mtp.layers.0.", "mtp.layers.0.", "MTP head f16");
  }

  // The first full-attention layer's source tensor `kind`, if any.
  // A source tensor's logical shape: a packed source's (MLX affine) as decoded, else as stored.
  std::vector<std::uint64_t> shape_of(std::string_view source) const {
    const auto it = ix_.by_name.find(source);
    if (it != ix_.by_name.end()) return it->second->shape;
    const auto& s = ck_.find(source)->entry->shape;
    return {s.begin(), s.end()};
  }

  // The first full-attention layer's tensor `kind`: its logical shape, if it has one.
  std::optional<std::vector<std::uint64_t>> attention_shape(std::string_view kind) const {
    for (std::uint64_t l = 0; l < layer_types_.size(); ++l) {
      if (layer_types_[l] != "full_attention") continue;
      const auto& t = layers_.at(l).tensors;
      const auto it = t.find(std::string(kind));
      if (it == t.end()) return std::nullopt;
      return shape_of(it->second);
    }
    return std::nullopt;
  }

  Json meta() const {
    const Json rope = text_.contains("rope_parameters") && text_["rope_parameters"].is_object()
                          ? text_["rope_parameters"]
                          : Json::object();
    Json m;
    m["mtp_num_hidden_layers"] = has_mtp() ? 1 : 0;
    m["model_type"] = full_.contains("model_type") ? full_["model_type"] : Json();
    m["hidden"] = hidden_;
    m["n_layers"] = n_layers_;
    m["n_active"] = layer_types_.size();
    m["layer_types"] = layer_types_;
    m["num_experts"] = experts_;
    m["topk"] = experts_ ? json_int(text_, "num_experts_per_tok", 0) : 0;
    m["moe_inter"] = moe_inter_;
    // qwen3_moe has no shared expert; a dense model's MLP is intermediate_size wide.
    m["shared_inter"] = q3moe_                ? 0
                        : experts_ == 0       ? static_cast<std::int64_t>(dense_inter_)
                        : has_shared_expert() ? json_int(text_, "shared_expert_intermediate_size",
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
    const double prf = json_float(text_, "partial_rotary_factor", q3moe_ ? 1.0 : 0.25);
    m["partial_rotary_factor"] = prf;
    // Qwen3-MoE's RMSNorm is x * w, not the hybrid's x * (1 + w).
    if (q3moe_) m["zero_centered_norms"] = false;
    add_attention_meta(m, prf);
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
    if (write_vision_) {
      m["image_token_id"] = full_["image_token_id"];
      Json v;
      for (const auto& [key, from] : kVisionKeys) v[key] = full_["vision_config"][from];
      m["vision"] = std::move(v);
    }
    return m;
  }

  // The keys of the first full-attention layer's shapes (none without one).
  void add_attention_meta(Json& m, double prf) const {
    bool full_attention = false;
    for (const auto& t : layer_types_) full_attention |= t == "full_attention";
    if (!full_attention) return;
    const std::int64_t qh = json_int(text_, "num_attention_heads", 0);
    const std::int64_t kvh = json_int(text_, "num_key_value_heads", 0);
    m["q_heads"] = qh;
    m["kv_heads"] = kvh;
    std::optional<std::int64_t> qhd, khd, rope_dim;
    const auto rows = [&](const char* kind) -> std::optional<std::int64_t> {
      const auto t = attention_shape(kind);
      if (!t || t->empty()) return std::nullopt;
      return static_cast<std::int64_t>((*t)[0]);
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
    if (const auto o = attention_shape("self_attn.o_proj.weight"); o && o->size() == 2) {
      m["o_in"] = (*o)[1];
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
    const std::int64_t rd = rope_dim ? *rope_dim : head_dim / 4;
    m["rope_dim"] = rd;
    if (q3moe_) {  // the rotated half split into three M-RoPE sections, in place
      const std::int64_t h = static_cast<std::int64_t>(static_cast<double>(rd) * prf) / 2;
      m["mrope_section"] = Json({h - 2 * (h / 3), h / 3, h / 3});
    }
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
  bool q3moe_ = false, write_vision_ = false;
  std::string prefix_ = "model.";
  std::map<std::string, std::string_view> globals_;      ///< output name -> source name
  std::map<std::string, std::string_view> mtp_globals_;  ///< "mtp.fc.weight" -> source name
  std::map<std::string, std::string_view> vision_;       ///< name after the prefix -> source
  std::map<std::uint64_t, Layer> layers_;
  Layer mtp_;
  std::vector<std::string> layer_types_;
  std::uint64_t hidden_ = 0, experts_ = 0, vocab_ = 0, n_layers_ = 0, moe_inter_ = 0;
  std::uint64_t dense_inter_ = 0;
};

}  // namespace

Result<ContainerPlan> plan_qwen36(const Checkpoint& ck, const ContainerOptions& o) {
  return Qwen36Planner(ck, o).run();
}

}  // namespace qrepack
