// colibri-inkling: the Inkling runtime's container (upstream convert_inkling_int4.py;
// reference/colibri-engines.md §1.13). Input: the release layout (thinkingmachines/Inkling: TML
// names under model.llm., fused gate/up rows interleaved g0,u0,g1,u1,...). Output: one
// out-NNNNN.safetensors per model-NNNNN-of-MMMMM.safetensors shard read, in HF names:
//   routed experts   model.layers.L.mlp.experts.gate_up_proj  U8 1-D, expert-major, each
//                    expert's gate rows then its up rows, per-row int4 (offset-binary, low
//                    nibble = even column; scale max(amax / 7, 1e-8)) or int8 (--bits
//                    experts=8, two's-complement bytes); .qs F32 1-D, one scale per row;
//                    ...experts.down_proj likewise
//   small tensors    norms, sconv kernels, the rel-logit banks, router, its bias and the
//                    global scales widened to F32 (shape kept)
//   everything else  as stored (BF16), the dense and shared gate/up split out of their
//                    interleaved fused tensors
//   dropped          model.visual.*, model.audio.*, model.mtp.* (mtp.safetensors is not read)
// Tensors sorted by dtype (widest first) then name, no __metadata__, as safetensors' save_file
// lays them out. A shard left with no tensor writes no file (upstream writes a 0-byte one,
// which inkling.c and the dense converter both refuse). Side files: config.json verbatim,
// tokenizer files, chat_template.jinja.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>

#include "qrepack/schemes/scheme.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"
#include "targets/inkling/inkling_layout.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kTarget = "colibri-inkling (inkling.c)";

// What happens to a release tensor.
enum class Kind : std::uint8_t {
  kAsStored,   ///< copied byte for byte
  kF32,        ///< widened to F32 (copied when it already is)
  kDenseW13,   ///< [2Id, H] interleaved -> mlp.gate_proj.weight, mlp.up_proj.weight
  kSharedW13,  ///< [S, 2I, H] interleaved -> shared_experts.gate_proj, .up_proj
  kExpertW13,  ///< [E, 2I, H] interleaved -> experts.gate_up_proj (quantized)
  kExpertW2,   ///< [E, H, I] -> experts.down_proj (quantized)
};

struct Rename {
  std::string_view release;  ///< after model.llm.layers.L.
  std::string_view hf;       ///< after model.layers.L. (the split kinds: the prefix)
  Kind kind;
};

// The layer tensors of the release and their container names (the release as
// reference/colibri-engines.md §1.13 and its loader name them).
constexpr std::array<Rename, 25> kLayerRenames = {{
    {"attn_norm.weight", "input_layernorm.weight", Kind::kF32},
    {"mlp_norm.weight", "post_attention_layernorm.weight", Kind::kF32},
    {"attn.wq_du.weight", "self_attn.q_proj.weight", Kind::kAsStored},
    {"attn.wk_dv.weight", "self_attn.k_proj.weight", Kind::kAsStored},
    {"attn.wv_dv.weight", "self_attn.v_proj.weight", Kind::kAsStored},
    {"attn.wr_du.weight", "self_attn.r_proj.weight", Kind::kAsStored},
    {"attn.wo_ud.weight", "self_attn.o_proj.weight", Kind::kAsStored},
    {"attn.q_norm.weight", "self_attn.q_norm.weight", Kind::kF32},
    {"attn.k_norm.weight", "self_attn.k_norm.weight", Kind::kF32},
    {"attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight", Kind::kF32},
    {"attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight", Kind::kF32},
    {"attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj", Kind::kF32},
    {"attn_sconv.weight", "attn_sconv.conv1d.weight", Kind::kF32},
    {"mlp_sconv.weight", "mlp_sconv.conv1d.weight", Kind::kF32},
    {"mlp.w13_dn.weight", "mlp.", Kind::kDenseW13},
    {"mlp.w2_md.weight", "mlp.down_proj.weight", Kind::kAsStored},
    {"mlp.global_scale", "mlp.global_scale", Kind::kF32},
    {"mlp.gate.weight", "mlp.gate.weight", Kind::kF32},
    {"mlp.gate.bias", "mlp.gate.e_score_correction_bias", Kind::kF32},
    {"mlp.gate.global_scale", "mlp.gate.global_scale", Kind::kF32},
    {"mlp.experts.w13_weight", "mlp.experts.gate_up_proj", Kind::kExpertW13},
    {"mlp.experts.w2_weight", "mlp.experts.down_proj", Kind::kExpertW2},
    {"mlp.shared_experts.shared_w13_weight", "mlp.shared_experts.", Kind::kSharedW13},
    {"mlp.shared_experts.shared_w2_weight", "mlp.shared_experts.down_proj", Kind::kAsStored},
    {"", "", Kind::kAsStored},  // sentinel: never matches
}};

struct GlobalRename {
  std::string_view release, hf;
  Kind kind;
};
constexpr std::array<GlobalRename, 4> kGlobals = {{
    {"model.llm.embed.weight", "model.embed_tokens.weight", Kind::kAsStored},
    {"model.llm.embed_norm.weight", "model.embed_norm.weight", Kind::kF32},
    {"model.llm.norm.weight", "model.norm.weight", Kind::kF32},
    {"model.llm.unembed.weight", "lm_head.weight", Kind::kAsStored},
}};

// The towers and the MTP head, dropped by name (upstream's text-only conversion).
struct Dropped {
  std::string_view prefix, rule, what;
};
constexpr std::array<Dropped, 3> kDropped = {{
    {"model.visual.", "inkling.vision_not_converted", "vision tower"},
    {"model.audio.", "inkling.audio_not_converted", "audio tower"},
    {"model.mtp.", "inkling.mtp_not_converted", "MTP head"},
}};

// A release tensor placed: its container name (or split prefix), kind and layer.
struct Placed {
  TensorRef raw;
  std::string hf;
  Kind kind = Kind::kAsStored;
  std::optional<std::uint64_t> layer;
};

bool is_float(Dtype d) { return d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF32; }

std::string dims_text(std::span<const std::uint64_t> s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// upstream's shard_out_name: model-<digits>-of-<digits>.safetensors -> out-<digits>, any other
// file read -> out-<its name>.
std::string out_name(std::string_view base) {
  constexpr std::string_view p = "model-", mid = "-of-", tail = ".safetensors";
  if (base.starts_with(p) && base.ends_with(tail)) {
    const std::string_view core = base.substr(p.size(), base.size() - p.size() - tail.size());
    const std::size_t at = core.find(mid);
    const auto digits = [](std::string_view s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
    };
    if (at != std::string_view::npos && digits(core.substr(0, at)) &&
        digits(core.substr(at + mid.size()))) {
      return fmt::format("out-{}.safetensors", core.substr(0, at));
    }
  }
  return fmt::format("out-{}", base);
}

class InklingPlanner {
 public:
  InklingPlanner(const Checkpoint& ck, const ContainerOptions& o) : ck_(ck), o_(o) {}

  Result<ContainerPlan> run() {
    QR_TRY(resolve_bits());
    QR_ASSIGN_OR_RETURN(config, read_config(dir(), "colibri-inkling"));
    config_ = std::move(config);
    QR_ASSIGN_OR_RETURN(d, read_inkling_dims(config_, dir()));
    d_ = std::move(d);
    plan_.family = "inkling";
    plan_.model_type = json_string(config_, "model_type", "inkling_mm_model");
    plan_.recognized = std::make_shared<Recognized>();
    QR_TRY(place());
    QR_TRY(check());
    build();
    return std::move(plan_);
  }

 private:
  const std::string& dir() const { return ck_.directory(); }

  Status resolve_bits() {
    QR_ASSIGN_OR_RETURN(s, parse_scheme(o_.scheme));
    if (s.kind == SchemeKind::kInt4Row) {
      bits_ = 4;
    } else if (s.kind == SchemeKind::kInt8Row) {
      bits_ = 8;
    } else {
      return Error(ErrorKind::kUsage,
                   fmt::format("--target colibri-inkling quantizes the routed experts per row "
                               "(--to int4-row, or int8-row / --bits experts=8), not --to {}",
                               o_.scheme))
          .with_rule("target.scheme");
    }
    if (o_.expert_bits) bits_ = o_.expert_bits;
    if ((bits_ != 4 && bits_ != 8) || o_.down_bits || o_.down_group) {
      return Error(ErrorKind::kUsage,
                   "--target colibri-inkling writes int4 or int8 experts (--bits experts=4|8), "
                   "both projections alike: inkling.c reads nothing else")
          .with_rule("target.scheme");
    }
    return ok_status();
  }

  // The files upstream reads: every model-*.safetensors, else model.safetensors.
  std::set<std::size_t> files_read() const {
    std::set<std::size_t> out;
    for (std::size_t s = 0; s < ck_.shards().size(); ++s) {
      const std::string base = fs::path(ck_.shards()[s].path()).filename().string();
      if (base.starts_with("model-") && base.ends_with(".safetensors")) out.insert(s);
    }
    if (!out.empty()) return out;
    for (std::size_t s = 0; s < ck_.shards().size(); ++s) {
      if (fs::path(ck_.shards()[s].path()).filename() == "model.safetensors") out.insert(s);
    }
    return out;
  }

  // Names every tensor: placed, dropped (recorded), or a problem.
  Status place() {
    const std::set<std::size_t> read = files_read();
    ContainerBuilder b(plan_);
    for (const std::uint32_t i : ck_.by_name()) {
      const TensorRef t = ck_.tensors()[i];
      const std::string_view n = t.entry->name;
      bool dropped = false;
      for (const Dropped& x : kDropped) {
        if (n.starts_with(x.prefix)) {
          b.source(n, "drop", x.rule);
          ++plan_.counts[fmt::format("{} dropped ({})", x.what, x.rule)];
          dropped = true;
        }
      }
      if (dropped) continue;
      if (!read.contains(t.shard)) {
        problems_.push_back(fmt::format(
            "{} (in {}, a file convert_inkling_int4.py never reads: only model-*.safetensors)", n,
            fs::path(ck_.shards()[t.shard].path()).filename().string()));
        continue;
      }
      if (auto p = classify(t)) {
        placed_.push_back(std::move(*p));
      } else {
        problems_.push_back(std::string(n));
      }
    }
    if (!problems_.empty()) {
      return unknown_tensors_error(dir(), kTarget, problems_);
    }
    return ok_status();
  }

  std::optional<Placed> classify(const TensorRef& t) const {
    const std::string_view n = t.entry->name;
    for (const GlobalRename& g : kGlobals) {
      if (n == g.release) return Placed{t, std::string(g.hf), g.kind, std::nullopt};
    }
    const auto layer = split_index(n, "model.llm.layers.");
    if (!layer) return std::nullopt;
    for (const Rename& r : kLayerRenames) {
      if (!r.release.empty() && layer->second == r.release) {
        return Placed{t, fmt::format("model.layers.{}.{}", layer->first, r.hf), r.kind,
                      layer->first};
      }
    }
    return std::nullopt;
  }

  // Shapes against the config, dtypes, and the tensors inkling.c requires.
  Status check() {
    const auto residents = inkling_residents(d_);
    std::set<std::string> made;
    const std::uint64_t h = d_.hidden, e = d_.experts, i = d_.moe_inter, s = d_.shared;
    for (const Placed& p : placed_) {
      const std::string_view n = p.raw.entry->name;
      const std::vector<std::uint64_t> shape(p.raw.entry->shape.begin(), p.raw.entry->shape.end());
      if (p.layer && *p.layer >= d_.layers) {
        problems_.push_back(
            fmt::format("{}: layer {} beyond num_hidden_layers {}", n, *p.layer, d_.layers));
        continue;
      }
      std::vector<std::string> outs;
      std::optional<std::vector<std::uint64_t>> want;
      switch (p.kind) {
        case Kind::kAsStored:
        case Kind::kF32:
          outs = {p.hf};
          if (const auto it = residents.find(p.hf); it != residents.end()) want = it->second.shape;
          break;
        case Kind::kDenseW13:
          outs = {p.hf + "gate_proj.weight", p.hf + "up_proj.weight"};
          if (!d_.sparse[*p.layer]) want = {2 * d_.dense_inter, h};
          break;
        case Kind::kSharedW13:
          outs = {p.hf + "gate_proj", p.hf + "up_proj"};
          if (d_.sparse[*p.layer]) want = {s, 2 * i, h};
          break;
        case Kind::kExpertW13:
        case Kind::kExpertW2:
          outs = {p.hf};
          if (d_.sparse[*p.layer]) {
            want = p.kind == Kind::kExpertW13 ? std::vector<std::uint64_t>{e, 2 * i, h}
                                              : std::vector<std::uint64_t>{e, h, i};
          }
          break;
      }
      if (!want) {
        problems_.push_back(fmt::format(
            "{}: layer {} is {} (config.json), which has no such tensor", n, p.layer.value_or(0),
            p.layer && d_.sparse[*p.layer] ? "an MoE layer" : "a dense layer"));
        continue;
      }
      for (const std::string& o : outs) made.insert(o);  // reported below if bad, not as missing
      if (shape != *want) {
        problems_.push_back(fmt::format("{}: shape {}, config.json implies {} (rule inkling.shape)",
                                        n, dims_text(shape), dims_text(*want)));
        continue;
      }
      const Dtype dt = p.raw.entry->dtype;
      if (p.kind != Kind::kAsStored && !is_float(dt)) {
        problems_.push_back(fmt::format("{}: dtype {} is not BF16/F16/F32 (rule inkling.dtype)", n,
                                        dtype_info(dt).name));
        continue;
      }
      if (p.kind == Kind::kExpertW13 || p.kind == Kind::kExpertW2) {
        const std::uint64_t cols = shape.back();
        if (bits_ == 4 && cols % 2 != 0) {
          problems_.push_back(fmt::format(
              "{}: rows of {} columns; int4 packs two a byte and the converter needs an even "
              "count (rule inkling.odd_columns)",
              n, cols));
          continue;
        }
      }
    }
    std::map<std::string, std::string> outs_of;  // two shards may not share an out file
    for (const std::size_t sh : files_read()) {
      const std::string base = fs::path(ck_.shards()[sh].path()).filename().string();
      const auto [it, fresh] = outs_of.emplace(out_name(base), base);
      if (!fresh) {
        problems_.push_back(
            fmt::format("shards {} and {} would both write {} (rule inkling.out_name)", it->second,
                        base, it->first));
      }
    }
    for (const auto& [name, r] : residents) {
      if (!r.optional && !made.contains(name)) {
        problems_.push_back(
            fmt::format("missing the tensor that becomes {} (inkling.c needs it)", name));
      }
    }
    for (std::uint64_t l = 0; l < d_.layers; ++l) {
      if (!d_.sparse[l]) continue;
      for (const char* x : {"gate_up_proj", "down_proj"}) {
        const std::string name = fmt::format("model.layers.{}.mlp.experts.{}", l, x);
        if (!made.contains(name)) {
          problems_.push_back(
              fmt::format("missing the tensor that becomes {} (inkling.c needs it)", name));
        }
      }
    }
    if (problems_.empty()) return ok_status();
    std::sort(problems_.begin(), problems_.end());
    return unknown_tensors_error(dir(), kTarget, problems_);
  }

  std::size_t weight_count() const {
    std::size_t n = 0;
    for (const Placed& p : placed_) {
      switch (p.kind) {
        case Kind::kDenseW13:
        case Kind::kSharedW13:
          n += 2;
          break;
        case Kind::kExpertW13:
          n += 2 * d_.experts;
          break;
        case Kind::kExpertW2:
          n += d_.experts;
          break;
        default:
          break;
      }
    }
    return n;
  }

  // A float view of `raw` as `rows` x `cols`: raw rows row0, row0 + stride, ... of expert
  // matrix `expert` (or of the whole tensor read as rows).
  const LogicalWeight* view(const TensorRef& raw, std::uint64_t rows, std::uint64_t cols,
                            std::optional<std::uint32_t> expert, std::uint64_t row0,
                            std::uint8_t stride) {
    const std::array<std::uint64_t, 2> shape{rows, cols};
    LogicalWeight w;
    w.name = raw.entry->name;
    w.shape = WeightShape(shape);
    w.data = raw;
    w.row0 = row0;
    w.expert = expert;
    w.source_dtype = raw.entry->dtype;
    w.row_stride = stride;
    plan_.recognized->weights.push_back(w);
    return &plan_.recognized->weights.back();
  }

  void add(ContainerBuilder& b, const Placed& p) {
    const TensorEntry& e = *p.raw.entry;
    const std::string_view src = e.name;
    switch (p.kind) {
      case Kind::kAsStored:
        b.copy(p.raw, p.hf);
        b.source(src, "keep", "inkling.as_stored");
        b.count("residents as stored");
        return;
      case Kind::kF32:
        if (e.dtype == Dtype::kF32) {
          b.copy(p.raw, p.hf);
        } else {
          b.cast_raw(p.raw, Dtype::kF32, p.hf);
        }
        b.source(src, "convert", "inkling.small_f32");
        b.count("small tensors f32");
        return;
      case Kind::kDenseW13: {
        const std::uint64_t rows = e.shape[0] / 2, cols = e.shape[1];
        b.cast(*view(p.raw, rows, cols, std::nullopt, 0, 2), e.dtype, p.hf + "gate_proj.weight");
        b.cast(*view(p.raw, rows, cols, std::nullopt, 1, 2), e.dtype, p.hf + "up_proj.weight");
        b.source(src, "unfuse", "inkling.deinterleave_dense");
        b.count("dense gate/up de-interleaved, as stored");
        return;
      }
      case Kind::kSharedW13: {
        const std::uint64_t s = e.shape[0], i = e.shape[1] / 2, h = e.shape[2];
        b.cast(*view(p.raw, s * i, h, std::nullopt, 0, 2), e.dtype, p.hf + "gate_proj", {s, i, h});
        b.cast(*view(p.raw, s * i, h, std::nullopt, 1, 2), e.dtype, p.hf + "up_proj", {s, i, h});
        b.source(src, "unfuse", "inkling.deinterleave_shared");
        b.count("shared gate/up de-interleaved, as stored");
        return;
      }
      case Kind::kExpertW13:
      case Kind::kExpertW2: {
        const bool w13 = p.kind == Kind::kExpertW13;
        const std::uint64_t experts = e.shape[0], r = e.shape[1], c = e.shape[2];
        QuantRule rule;
        rule.bits = bits_;
        rule.nibbles = Nibbles::kOffsetBinary;
        rule.amax_floor = 0.0f;
        rule.scale_floor = 1e-8f;
        std::vector<UnitPiece> pieces;
        for (std::uint64_t x = 0; x < experts; ++x) {
          const auto ex = static_cast<std::uint32_t>(x);
          if (w13) {  // gate rows (even), then up rows (odd)
            pieces.push_back({view(p.raw, r / 2, c, ex, 0, 2), rule});
            pieces.push_back({view(p.raw, r / 2, c, ex, 1, 2), rule});
          } else {
            pieces.push_back({view(p.raw, r, c, ex, 0, 1), rule});
          }
        }
        const std::uint64_t n = experts * r * c;
        b.quant(std::move(pieces), p.hf, Dtype::kU8, {bits_ == 4 ? n / 2 : n}, p.hf + ".qs",
                {experts * r});
        b.source(src, "convert", w13 ? "inkling.experts_deinterleave_int" : "inkling.experts_int");
        b.count(fmt::format("routed experts int{} per row (fused, 1-D)", bits_));
        return;
      }
    }
  }

  void build() {
    plan_.recognized->weights.reserve(weight_count());  // the views stay where they are
    // Files in source-shard order; a shard with nothing kept gets none.
    std::map<std::size_t, std::vector<const Placed*>> by_shard;
    for (const Placed& p : placed_) by_shard[p.raw.shard].push_back(&p);
    std::size_t empty = 0;
    for (const std::size_t s : files_read()) {
      if (!by_shard.contains(s)) ++empty;
    }
    if (empty) {
      plan_.counts["shards with nothing kept (no out file; upstream: 0 bytes)"] = empty;
    }
    std::map<std::string, std::size_t> files;  // out name -> shard, in name order
    for (const auto& [s, list] : by_shard) {
      files.emplace(out_name(fs::path(ck_.shards()[s].path()).filename().string()), s);
    }
    ContainerBuilder b(plan_);
    for (const auto& [name, s] : files) {
      b.file(name);
      for (const Placed* p : by_shard.at(s)) add(b, *p);
    }
    b.sort_files_for_alignment();  // save_file's order: dtype (widest first), then name
    copy_side_files(plan_, dir(),
                    {"config.json", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json", "chat_template.jinja"});
  }

  const Checkpoint& ck_;
  const ContainerOptions& o_;
  int bits_ = 4;
  Json config_;
  InklingDims d_;
  ContainerPlan plan_;
  std::vector<Placed> placed_;
  std::vector<std::string> problems_;
};

}  // namespace

Result<ContainerPlan> plan_inkling(const Checkpoint& ck, const ContainerOptions& o) {
  return InklingPlanner(ck, o).run();
}

}  // namespace qrepack
