#include "qrepack/checkpoint/logical_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/mlx_quantization.h"
#include "core/check.h"
#include "core/problems.h"
#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/mlx_affine.h"

namespace qrepack {
namespace {

bool is_float_source(Dtype d) {
  return d == Dtype::kF16 || d == Dtype::kBF16 || d == Dtype::kF32 || d == Dtype::kF64;
}

std::string shape_str(std::span<const std::uint64_t> s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

struct FusedExpertName {
  std::string_view stack;  ///< "model." or "mtp.": whose layers
  std::string layer;       ///< the layer index as written
  /// HF's gate_up_proj (gate rows then up rows) or down_proj; MLX's switch_mlp stacks one
  /// projection each ("gate_proj.weight", "up_proj.weight", "down_proj.weight").
  std::string_view projection;
  bool gate_up() const { return projection == "gate_up_proj"; }
};

// model.layers.<digits>.mlp.experts.{gate_up_proj,down_proj} (or under
// model.language_model., as multimodal Qwen3.5/3.6 checkpoints nest their text model), and
// mlx-lm's stacked model.layers.<digits>.mlp.switch_mlp.{gate,up,down}_proj.weight, parsed
// without a regex engine. The slices are named model.layers.<digits>.mlp.experts.<e>.*; an MTP
// head's (mtp.layers.<digits>.mlp.experts.*, Qwen3.8) mtp.layers.<digits>.mlp.experts.<e>.*.
std::optional<FusedExpertName> parse_fused_expert_name(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.", kNested = "model.language_model.layers.",
                             kMtp = "mtp.layers.", kMid = ".mlp.experts.";
  std::string_view stack = "model.";
  if (name.starts_with(kNested)) {
    name.remove_prefix(kNested.size());
  } else if (name.starts_with(kPrefix)) {
    name.remove_prefix(kPrefix.size());
  } else if (name.starts_with(kMtp)) {
    name.remove_prefix(kMtp.size());
    stack = "mtp.";
  } else {
    return std::nullopt;
  }
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || !parse_decimal(name.substr(0, dot))) return std::nullopt;
  const std::string_view layer = name.substr(0, dot), rest = name.substr(dot);
  constexpr std::string_view kSwitch = ".mlp.switch_mlp.";
  if (rest.starts_with(kSwitch)) {
    for (std::string_view p : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) {
      if (rest.substr(kSwitch.size()) == p) return FusedExpertName{stack, std::string(layer), p};
    }
    return std::nullopt;
  }
  if (!rest.starts_with(kMid)) return std::nullopt;
  const std::string_view proj = rest.substr(kMid.size());
  for (std::string_view p : {"gate_up_proj", "down_proj"}) {
    if (proj == p) return FusedExpertName{stack, std::string(layer), p};
  }
  return std::nullopt;
}

// One element: shape [] or [1].
bool one_element(const TensorEntry& e) {
  return e.shape.empty() || (e.shape.size() == 1 && e.shape[0] == 1);
}

bool is_scalar(const TensorEntry& e) { return e.dtype == Dtype::kF32 && one_element(e); }

/// A quantized weight's encoding and sidecars, found by the claim pass.
struct Claim {
  SourceEncoding encoding;
  std::string_view logical_base;  ///< the weight's source name without "_packed" (a view of it)
  std::optional<TensorRef> scale, global;
  bool divides = false;
  std::uint64_t block_rows = 128, block_cols = 128;  ///< the scale grid
  std::uint64_t col_factor = 1;  ///< logical columns per stored column (packed nibbles)
};

/// A scale grid [ceil(O/br), ceil(I/bc)] of a 2-D or stacked 3-D weight.
std::vector<std::uint64_t> grid_of(std::span<const std::uint64_t> ws, std::uint64_t br,
                                   std::uint64_t bc) {
  std::vector<std::uint64_t> g(ws.begin(), ws.end());
  if (ws.size() >= 2) {
    g[ws.size() - 2] = (ws[ws.size() - 2] + br - 1) / br;
    g[ws.size() - 1] = (ws[ws.size() - 1] + bc - 1) / bc;
  }
  return g;
}

bool is_block_scale_dtype(Dtype d) {
  return d == Dtype::kF32 || d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF8E8M0;
}

// "<p>.weight" -> "<p>" (DeepSeek's sidecars are "<p>.scale"); empty when not a ".weight".
std::string_view weight_prefix(std::string_view name) {
  return name.ends_with(".weight") ? name.substr(0, name.size() - 7) : std::string_view();
}

// Without config.json the engine's converter takes a "language_model." prefix (or MiniMax's
// block_sparse_moe names) as a MiniMax checkpoint; so does qrepack, and says so.
NameMap detect_name_map(const Checkpoint& ck) {
  for (const TensorRef t : ck.tensors()) {
    const std::string_view n = t.entry->name;
    if (n.starts_with("language_model.") || n.find(".block_sparse_moe.") != std::string::npos) {
      return NameMap::kMiniMax;
    }
  }
  return NameMap::kIdentity;
}

class Recognizer {
 public:
  Recognizer(const Checkpoint& ck, const MoeConfig* cfg, Recognized& out)
      : ck_(ck), cfg_(cfg), out_(out) {}

  // Pass 1: every quantized weight claims its sidecars; the family's drops are recorded.
  void claim_all() {
    for (const TensorRef t : ck_.tensors()) {
      const std::string_view name = t.entry->name;
      if (!map_source_name(out_.name_map, name)) {
        drop(name, "vision_tower");
        continue;
      }
      // Static activation scales: F32, or BF16 as some compressed-tensors releases store the
      // shared experts' input_global_scale; one element either way.
      if ((name.ends_with(".input_scale") || name.ends_with(".input_global_scale")) &&
          one_element(*t.entry) && is_float_source(t.entry->dtype)) {
        drop(name, "activation_scale");
        continue;
      }
      if (t.entry->dtype == Dtype::kU8) claim_u8(t);
      if (t.entry->dtype == Dtype::kI8) claim_mxfp4_deepseek(t);
      if (t.entry->dtype == Dtype::kI32) claim_int4_ct(t);
      if (t.entry->dtype == Dtype::kU32) claim_mlx_affine(t);
    }
    // NVFP4's F8_E4M3 block scales are taken by now; every other F8_E4M3 tensor is a weight.
    for (const TensorRef t : ck_.tensors()) {
      if (t.entry->dtype == Dtype::kF8E4M3 && !taken_.contains(t.entry->name)) claim_fp8(t);
    }
  }

  bool taken(std::string_view name) const { return taken_.contains(name); }
  std::size_t taken_count() const { return taken_.size(); }
  const Claim* claim(std::string_view name) const {
    const auto it = claims_.find(name);
    return it == claims_.end() ? nullptr : &it->second;
  }
  /// A quantized tensor whose claim failed (already reported).
  bool failed(std::string_view name) const { return failed_.contains(name); }
  Problems& problems() { return problems_; }

 private:
  void drop(std::string_view name, std::string_view rule) {
    out_.dropped.emplace_back(name, rule);
    taken_.insert(name);
  }
  void fail(std::string_view weight, ErrorKind kind, std::string message) {
    problems_.add(kind, std::move(message));
    failed_.insert(weight);
  }
  void consume(const TensorRef& side, std::string_view weight) {
    taken_.insert(side.entry->name);
    out_.consumed.emplace_back(side.entry->name, weight);
  }

  void claim_fp8(const TensorRef& t) {
    const std::string_view name = t.entry->name;
    if (const auto s = ck_.find(std::string(name) + kScaleInvSuffix)) {
      claim_fp8_block(t, *s);
      return;
    }
    const std::string_view prefix = weight_prefix(name);
    if (const auto s = prefix.empty() ? std::nullopt : ck_.find(fmt::format("{}.scale", prefix))) {
      claim_fp8_tiles(t, *s);
      return;
    }
    const std::string base = name.ends_with(".weight") ? std::string(name) : std::string();
    const auto ts = base.empty() ? std::nullopt : ck_.find(base + "_scale");
    if (!ts) {
      fail(name, ErrorKind::kMissingScale,
           fmt::format("tensor '{}': F8_E4M3 weight has neither '{}{}' (block scales) nor "
                       "'{}_scale' (a per-tensor scale) (rule fp8.sidecar)",
                       name, name, kScaleInvSuffix, name));
      return;
    }
    if (!is_scalar(*ts->entry) || t.entry->shape.size() != 2) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': {} {} is not one F32 per-tensor scale of a 2-D weight "
                       "(per-channel FP8 scales are not supported) (rule fp8_tensor.scale_shape)",
                       ts->entry->name, dtype_info(ts->entry->dtype).safetensors,
                       shape_str(ts->entry->shape)));
      return;
    }
    Claim c{SourceEncoding::kFp8Tensor, name, *ts, std::nullopt, false, 1, 1, 1};
    consume(*ts, name);
    claims_.emplace(name, std::move(c));
  }

  void claim_fp8_block(const TensorRef& t, const TensorRef& s) {
    const std::string_view name = t.entry->name;
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const std::vector<std::uint64_t> want = grid_of(ws, out_.block_rows, out_.block_cols);
    const Dtype sd = s.entry->dtype;
    if (ws.size() < 2 || ws.size() > 3 || !is_block_scale_dtype(sd) ||
        !std::ranges::equal(s.entry->shape, want)) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': {} {} does not fit weight {} with {}x{} blocks "
                       "(expected F32, BF16, F16 or F8_E8M0 {}) (rule fp8_block.scale_shape)",
                       s.entry->name, dtype_info(sd).safetensors, shape_str(s.entry->shape),
                       shape_str(ws), out_.block_rows, out_.block_cols, shape_str(want)));
      return;
    }
    add_fp8_block(t, s, out_.block_rows, out_.block_cols);
  }

  // DeepSeek V4 / V4.1's "<p>.scale": one scale per 128x128 block, 32x32 tile (V4.1 dense) or
  // row group of 32 (V4.1's engram table); the scale's shape says which. Two grids of the same
  // shape cover the weight identically, so the first match is the answer.
  void claim_fp8_tiles(const TensorRef& t, const TensorRef& s) {
    const std::string_view name = t.entry->name;
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const std::array<std::pair<std::uint64_t, std::uint64_t>, 4> grids = {
        {{out_.block_rows, out_.block_cols}, {128, 128}, {32, 32}, {1, 32}}};
    if (ws.size() == 2 && is_block_scale_dtype(s.entry->dtype)) {
      for (const auto& [br, bc] : grids) {
        if (std::ranges::equal(s.entry->shape, grid_of(ws, br, bc))) {
          add_fp8_block(t, s, br, bc);
          return;
        }
      }
    }
    fail(name, ErrorKind::kScaleShapeMismatch,
         fmt::format(
             "tensor '{}': {} {} is not a grid of F32, BF16, F16 or F8_E8M0 scales over weight "
             "{} in 128x128 blocks {}, 32x32 tiles {} or row groups of 32 {} (rule "
             "fp8_block.scale_shape)",
             s.entry->name, dtype_info(s.entry->dtype).safetensors, shape_str(s.entry->shape),
             shape_str(ws), shape_str(grid_of(ws, 128, 128)), shape_str(grid_of(ws, 32, 32)),
             shape_str(grid_of(ws, 1, 32))));
  }

  void add_fp8_block(const TensorRef& t, const TensorRef& s, std::uint64_t br, std::uint64_t bc) {
    Claim c{SourceEncoding::kFp8Block, t.entry->name, s, std::nullopt, false, br, bc};
    consume(s, t.entry->name);
    claims_.emplace(t.entry->name, std::move(c));
  }

  // A U8 "<p>.weight_packed" whose "<p>.weight_scale" is U8 too is compressed-tensors MXFP4
  // (UE8M0 exponents; Kimi K3); anything else U8 may be NVFP4.
  void claim_u8(const TensorRef& t) {
    const std::string_view name = t.entry->name;
    if (name.ends_with(".weight_packed")) {
      const std::string_view base = name.substr(0, name.size() - 7);
      const auto bs = ck_.find(fmt::format("{}_scale", base));
      if (bs && bs->entry->dtype == Dtype::kU8) {
        claim_mxfp4(t, *bs, ck_.find(fmt::format("{}_shape", base)), base, "mxfp4");
        return;
      }
    }
    claim_nvfp4(t);
  }

  // DeepSeek V4 / V4.1's FP4 experts: I8 "<p>.weight" [O, I/2] + F8_E8M0 "<p>.scale".
  void claim_mxfp4_deepseek(const TensorRef& t) {
    const std::string_view prefix = weight_prefix(t.entry->name);
    const auto s = prefix.empty() ? std::nullopt : ck_.find(fmt::format("{}.scale", prefix));
    if (!s) return;  // a plain I8 tensor: unclaimed in pass 2
    if (s->entry->dtype != Dtype::kF8E8M0) {
      fail(t.entry->name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': an I8 weight of packed FP4 pairs needs F8_E8M0 scales; '{}' "
                       "is {} (rule mxfp4.scale_shape)",
                       t.entry->name, s->entry->name, dtype_info(s->entry->dtype).safetensors));
      return;
    }
    claim_mxfp4(t, *s, std::nullopt, t.entry->name, "mxfp4");
  }

  // E2M1 pairs [O, P] with one exponent per 32 of the 2P columns: [O, 2P / 32].
  void claim_mxfp4(const TensorRef& t, const TensorRef& s, std::optional<TensorRef> shape_t,
                   std::string_view base, std::string_view rule) {
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const bool fits =
        ws.size() == 2 && ws[1] % 16 == 0 && std::ranges::equal(s.entry->shape, grid_of(ws, 1, 16));
    if (!fits) {
      fail(t.entry->name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': {} {} is not one exponent per 32 inputs of packed FP4 weight "
                       "{} (inputs a multiple of 32) (rule {}.scale_shape)",
                       t.entry->name, s.entry->name, shape_str(s.entry->shape), shape_str(ws),
                       rule));
      return;
    }
    if (shape_t && !claim_shape_tensor(t, *shape_t)) return;
    Claim c{SourceEncoding::kMxfp4, base, s, shape_t, false, 1, 32, 2};
    consume(s, base);
    if (shape_t) consume(*shape_t, base);
    claims_.emplace(t.entry->name, std::move(c));
  }

  // compressed-tensors pack-quantized int4 (Kimi K2): I32 "<p>.weight_packed" [O, I/8] +
  // "<p>.weight_scale" [O, ceil(I/g)] + "<p>.weight_shape" [2]; g is the power of two the scale
  // grid implies (two powers of two give the same grid only when it is one group per row).
  void claim_int4_ct(const TensorRef& t) {
    const std::string_view name = t.entry->name;
    if (!name.ends_with(".weight_packed")) return;  // a plain I32 tensor: unclaimed in pass 2
    const std::string_view base = name.substr(0, name.size() - 7);
    if (const auto zp = ck_.find(fmt::format("{}_zero_point", base))) {
      fail(name, ErrorKind::kInvalidConfig,
           fmt::format("tensor '{}': asymmetric int4 ('{}') is not read; qrepack reads symmetric "
                       "pack-quantized int4 only (rule int4_ct.symmetric)",
                       name, zp->entry->name));
      return;
    }
    const auto s = ck_.find(fmt::format("{}_scale", base));
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const Dtype sd = s ? s->entry->dtype : Dtype::kF32;
    std::uint64_t group = 0;
    if (s && ws.size() == 2 && s->entry->shape.size() == 2 && s->entry->shape[0] == ws[0] &&
        (sd == Dtype::kBF16 || sd == Dtype::kF16 || sd == Dtype::kF32)) {
      for (std::uint64_t g = 8; g <= 32768 && group == 0; g *= 2) {
        if ((8 * ws[1] + g - 1) / g == s->entry->shape[1]) group = g;
      }
    }
    if (group == 0) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format(
               "tensor '{}': needs '{}_scale' BF16, F16 or F32 [{}, ceil({} / g)] for a "
               "power-of-two group g; found {} (rule int4_ct.scale_shape)",
               name, base, ws.empty() ? 0 : ws[0], ws.size() == 2 ? 8 * ws[1] : 0,
               s ? fmt::format("{} {}", dtype_info(sd).safetensors, shape_str(s->entry->shape))
                 : std::string("none")));
      return;
    }
    const auto shape_t = ck_.find(fmt::format("{}_shape", base));
    if (shape_t && !claim_shape_tensor(t, *shape_t)) return;
    Claim c{SourceEncoding::kInt4Packed, base, *s, shape_t, false, 1, group, 8};
    consume(*s, base);
    if (shape_t) consume(*shape_t, base);
    claims_.emplace(name, std::move(c));
  }

  // MLX affine (mlx-community): U32 "<p>.weight" [.., O, I * bits / 32] + "<p>.scales" and
  // "<p>.biases" [.., O, I / group] of one float dtype; bits and group from config.json's
  // quantization block for module <p> (formats/mlx_affine.h).
  void claim_mlx_affine(const TensorRef& t) {
    const std::string_view name = t.entry->name;
    const std::string_view prefix = weight_prefix(name);
    const auto s = prefix.empty() ? std::nullopt : ck_.find(fmt::format("{}.scales", prefix));
    if (!s) return;  // a plain U32 tensor: unclaimed in pass 2
    const auto b = ck_.find(fmt::format("{}.biases", prefix));
    const auto params = mlx_params(name, prefix);
    if (!params) return;
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const std::uint64_t bits = params->bits, group = params->group;
    const std::uint64_t in = ws.size() >= 2 ? ws.back() * 32 / bits : 0;
    std::vector<std::uint64_t> want(ws.begin(), ws.end());
    if (!want.empty()) want.back() = group ? in / group : 0;
    const Dtype sd = s->entry->dtype;
    const bool fits = ws.size() >= 2 && ws.size() <= 3 && group % (32 / bits) == 0 &&
                      in % group == 0 && std::ranges::equal(s->entry->shape, want) &&
                      (sd == Dtype::kF32 || sd == Dtype::kF16 || sd == Dtype::kBF16) && b &&
                      b->entry->dtype == sd && std::ranges::equal(b->entry->shape, want);
    if (!fits) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': MLX affine {}-bit group {} weight {} needs '{}.scales' and "
                       "'{}.biases' of one float dtype shaped {}; found {} and {} (rule "
                       "mlx_affine.scale_shape)",
                       name, bits, group, shape_str(ws), prefix, prefix, shape_str(want),
                       describe(s), describe(b)));
      return;
    }
    Claim c{SourceEncoding::kMlxAffine, name, *s, *b, false, 1, group, 32 / bits};
    consume(*s, name);
    consume(*b, name);
    claims_.emplace(name, std::move(c));
  }

  static std::string describe(const std::optional<TensorRef>& t) {
    if (!t) return "none";
    return fmt::format("{} {}", dtype_info(t->entry->dtype).safetensors,
                       shape_str(t->entry->shape));
  }

  // The bits and group size config.json gives module `prefix` (read once, on the first MLX
  // weight), or nothing when it gives none the decoder reads (the failure recorded).
  std::optional<MlxParams> mlx_params(std::string_view name, std::string_view prefix) {
    if (!mlx_loaded_) {
      mlx_loaded_ = true;
      auto q = load_mlx_quantization(ck_.directory());
      if (!q.ok()) {
        const std::string rule(q.error().rule());
        fail(name, q.error().kind(),
             fmt::format("tensor '{}': config.json: {}{}", name, q.error().message(),
                         rule.empty() ? "" : fmt::format(" (rule {})", rule)));
        return std::nullopt;
      }
      mlx_ = std::move(*q);
    }
    const auto refuse = [&](std::string why) {
      fail(name, ErrorKind::kInvalidConfig,
           fmt::format("tensor '{}': {} (rule mlx_affine.config)", name, why));
      return std::nullopt;
    };
    if (!mlx_) {
      return refuse(
          "an MLX affine weight (U32 with .scales), but config.json has no \"quantization\" "
          "block with bits and group_size; qrepack does not guess them");
    }
    if (mlx_->mode != "affine") {
      return refuse(
          fmt::format("config.json's quantization mode is \"{}\"; qrepack reads "
                      "MLX's \"affine\" mode only",
                      mlx_->mode.substr(0, 40)));
    }
    const auto p = mlx_->for_module(prefix);
    if (!p) return refuse("config.json's quantization block leaves this module unquantized");
    if (!mlx_affine_bits_supported(p->bits) || p->group == 0 || p->group > 4096 ||
        (p->group & (p->group - 1)) != 0) {
      return refuse(fmt::format(
          "bits {} group_size {}: qrepack reads MLX affine bits 2, 4 and 8 (3, 5 and 6 pack "
          "codes across words) with a power-of-two group up to 4096",
          p->bits, p->group));
    }
    return p;
  }

  // compressed-tensors' "<p>.weight_shape": I32 or I64 [2], the unpacked [O, I] (read back and
  // compared when the weight is opened).
  bool claim_shape_tensor(const TensorRef& t, const TensorRef& shape_t) {
    const Dtype d = shape_t.entry->dtype;
    if ((d == Dtype::kI32 || d == Dtype::kI64) && shape_t.entry->shape.size() == 1 &&
        shape_t.entry->shape[0] == 2) {
      return true;
    }
    fail(t.entry->name, ErrorKind::kScaleShapeMismatch,
         fmt::format("tensor '{}': '{}' is {} {}, not the I32 or I64 [2] unpacked shape (rule "
                     "compressed_tensors.weight_shape)",
                     t.entry->name, shape_t.entry->name, dtype_info(d).safetensors,
                     shape_str(shape_t.entry->shape)));
    return false;
  }

  // ModelOpt "<p>.weight" + weight_scale + weight_scale_2, or compressed-tensors
  // "<p>.weight_packed" + weight_scale + weight_global_scale (reference/formats.md §4).
  void claim_nvfp4(const TensorRef& t) {
    const std::string_view name = t.entry->name;
    const bool ct = name.ends_with(".weight_packed");
    if (!ct && !name.ends_with(".weight")) return;
    const std::string_view base =
        std::string_view(name).substr(0, ct ? name.size() - 7 : name.size());  // "<p>.weight"
    const auto bs = ck_.find(fmt::format("{}_scale", base));
    const auto gs = ck_.find(fmt::format("{}{}", base, ct ? "_global_scale" : "_scale_2"));
    if (!bs || !gs) {
      if (bs || gs || ct) {
        fail(name, ErrorKind::kMissingScale,
             fmt::format("tensor '{}': NVFP4 weight lacks '{}_scale' or '{}' (rule "
                         "nvfp4.sidecar)",
                         name, base, fmt::format("{}{}", base, ct ? "_global_scale" : "_scale_2")));
      }
      return;  // a plain U8 tensor: unclaimed in pass 2
    }
    const std::span<const std::uint64_t> ws = t.entry->shape;
    const std::uint64_t in = ws.size() == 2 ? 2 * ws[1] : 0;
    const std::vector<std::uint64_t> want_scale{ws.empty() ? 0 : ws[0], (in + 15) / 16};
    if (ws.size() != 2 || bs->entry->dtype != Dtype::kF8E4M3 ||
        !std::ranges::equal(bs->entry->shape, want_scale)) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': {} {} is not the linear F8_E4M3 {} of per-16 scales for "
                       "packed weight {}; swizzled or padded scale layouts are refused (rule "
                       "nvfp4.scale_shape)",
                       bs->entry->name, dtype_info(bs->entry->dtype).safetensors,
                       shape_str(bs->entry->shape), shape_str(want_scale), shape_str(ws)));
      return;
    }
    if (!is_scalar(*gs->entry)) {
      fail(name, ErrorKind::kScaleShapeMismatch,
           fmt::format("tensor '{}': {} {} is not one F32 global scale (rule "
                       "nvfp4.global_scale)",
                       gs->entry->name, dtype_info(gs->entry->dtype).safetensors,
                       shape_str(gs->entry->shape)));
      return;
    }
    if (const auto why = convention_mismatch(ct)) {
      fail(name, ErrorKind::kInvalidConfig,
           fmt::format("tensor '{}': {} (rule nvfp4.convention)", name, *why));
      return;
    }
    Claim c{SourceEncoding::kNvfp4, base, *bs, *gs, ct, 1, 16, 2};
    consume(*bs, base);
    consume(*gs, base);
    claims_.emplace(name, std::move(c));
  }

  // ModelOpt multiplies by weight_scale_2, compressed-tensors divides by weight_global_scale:
  // config.json's quantization_config must say which one wrote the file.
  std::optional<std::string> convention_mismatch(bool ct) const {
    const char* have = ct ? "compressed-tensors (weight_global_scale, divided)"
                          : "ModelOpt (weight_scale_2, multiplied)";
    if (!cfg_ || cfg_->quant_method.empty()) {
      return fmt::format(
          "NVFP4 tensors in the {} convention, but no config.json "
          "quantization_config states the convention; qrepack does not guess it",
          have);
    }
    const bool ok = ct ? cfg_->quant_method == "compressed-tensors" &&
                             (cfg_->quant_format == "nvfp4-pack-quantized" ||
                              cfg_->quant_format == "mixed-precision")
                       : cfg_->quant_method == "modelopt";
    if (ok) return std::nullopt;
    return fmt::format(
        "NVFP4 tensors in the {} convention, but config.json says quant_method "
        "\"{}\" format \"{}\"",
        have, cfg_->quant_method, cfg_->quant_format);
  }

  const Checkpoint& ck_;
  const MoeConfig* cfg_;
  Recognized& out_;
  Problems problems_;
  // Keys view the checkpoint's entry names (it outlives the recognizer).
  std::unordered_set<std::string_view> taken_, failed_;
  std::unordered_map<std::string_view, Claim> claims_;
  bool mlx_loaded_ = false;
  std::optional<MlxQuantization> mlx_;
};

// A logical weight of `t` (with its claim's scales and sidecars, when quantized).
LogicalWeight make_weight(std::string_view name, WeightShape shape, const TensorRef& t,
                          const Claim* claim, std::optional<std::uint64_t> expert,
                          std::uint64_t row0) {
  return LogicalWeight{
      .name = name,
      .shape = shape,
      .data = t,
      .scale = claim ? MaybeTensor(claim->scale) : MaybeTensor(),
      .global_scale = claim ? MaybeTensor(claim->global) : MaybeTensor(),
      .row0 = row0,
      .expert =
          expert ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(*expert)) : std::nullopt,
      .encoding = claim ? claim->encoding : SourceEncoding::kFloat,
      .source_dtype = t.entry->dtype,
      .global_divides = claim && claim->divides,
      .block_rows = static_cast<std::uint16_t>(claim ? claim->block_rows : 128),
      .block_cols = static_cast<std::uint16_t>(claim ? claim->block_cols : 128)};
}

// Counts a made weight by its encoding, and keeps it when asked to.
void add(Recognized& out, RecognizeWeights keep, LogicalWeight w) {
  ++out.encoding_counts[source_encoding_name(w)];
  ++out.weight_count;
  if (keep == RecognizeWeights::kKeep) out.weights.push_back(std::move(w));
}

// A fused 3-D expert tensor becomes 2E (gate_up) or E (one projection) logical weights. Shape
// problems are collected; only a count over the cap stops recognition at once.
Status unfuse(const Checkpoint& ck, const MoeConfig* cfg, const TensorRef& t, const Claim* claim,
              const FusedExpertName& fused, Problems& problems, Recognized& out,
              RecognizeWeights keep) {
  const std::string_view name = t.entry->name;
  // The logical shape: packed sources (MLX affine) hold several inputs per stored column.
  const std::array<std::uint64_t, 3> shape = {t.entry->shape[0], t.entry->shape[1],
                                              t.entry->shape[2] * (claim ? claim->col_factor : 1)};
  const bool gate_up = fused.gate_up();
  const std::uint64_t e_count = shape[0];
  const std::uint64_t rows = gate_up ? shape[1] / 2 : shape[1];
  if (gate_up && shape[1] % 2 != 0) {
    problems.add(ErrorKind::kUnexpectedShape,
                 fmt::format("tensor '{}': fused gate_up {} has an odd row count "
                             "(rule experts.fused_shape)",
                             name, shape_str(shape)));
    return ok_status();
  }
  if (cfg) {
    const std::uint64_t m_rows = cfg->moe_intermediate_size, d = cfg->hidden_size;
    // gate_up [E, 2M, D]; down [E, D, M]; MLX's one-projection gate or up [E, M, D].
    const bool down = fused.projection.starts_with("down_proj");
    const std::array<std::uint64_t, 3> want = {
        cfg->n_routed_experts, down ? d : (gate_up ? 2 : 1) * m_rows, down ? m_rows : d};
    if (!std::ranges::equal(shape, want)) {
      problems.add(ErrorKind::kUnexpectedShape,
                   fmt::format("tensor '{}': fused experts {} but config.json implies {} "
                               "(rule experts.fused_shape)",
                               name, shape_str(shape), shape_str(want)));
      return ok_status();
    }
  }
  // Unfusing multiplies one file tensor into 2E weights: bounded like a config's count.
  if (rows == 0 || shape[2] == 0 || e_count > kMaxModelWeights ||
      out.weight_count + 2 * e_count > kMaxModelWeights) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("fused experts {} would make more than {} weights, or an empty "
                             "expert",
                             shape_str(shape), kMaxModelWeights))
        .in_file(ck.directory())
        .in_tensor(name)
        .with_rule("experts.max_weights");
  }
  for (std::uint64_t e = 0; e < e_count; ++e) {
    const std::string base =
        fmt::format("{}layers.{}.mlp.experts.{}.", fused.stack, fused.layer, e);
    const std::uint64_t dims[] = {rows, shape[2]};
    const WeightShape wshape(dims);
    std::string full;  // outlives add(); kept weights view their copy in out.names
    const auto named = [&](std::string_view proj) -> std::string_view {
      full = base;
      full += proj;
      return keep == RecognizeWeights::kKeep ? out.names->copy(full) : std::string_view(full);
    };
    if (gate_up) {  // gate = the first M rows (reference/colibri.md §2.1)
      add(out, keep, make_weight(named("gate_proj.weight"), wshape, t, claim, e, 0));
      add(out, keep, make_weight(named("up_proj.weight"), wshape, t, claim, e, rows));
    } else if (fused.projection == "down_proj") {
      add(out, keep, make_weight(named("down_proj.weight"), wshape, t, claim, e, 0));
    } else {  // MLX's switch_mlp: one projection, named as the stack names it
      add(out, keep, make_weight(named(fused.projection), wshape, t, claim, e, 0));
    }
  }
  return ok_status();
}

}  // namespace

void Sidecars::push_back(const TensorRef& t) {
  QR_CHECK(count < refs.size(), "a weight with more than two sidecars");
  refs[count++] = t;
}

WeightShape::WeightShape(std::span<const std::uint64_t> dims) {
  QR_CHECK(dims.size() <= dims_.size(), "a logical weight of rank above 2");
  std::copy(dims.begin(), dims.end(), dims_.begin());
  rank_ = static_cast<std::uint8_t>(dims.size());
}

static_assert(sizeof(LogicalWeight) <= 112);

Sidecars LogicalWeight::sidecars() const {
  Sidecars s;
  if (scale) s.push_back(*scale);
  if (global_scale) s.push_back(*global_scale);
  return s;
}

std::string source_encoding_name(const LogicalWeight& w) {
  switch (w.encoding) {
    case SourceEncoding::kFloat:
      return std::string(dtype_info(w.source_dtype).name);
    case SourceEncoding::kFp8Block: {
      const std::string grid = w.block_rows == 128 && w.block_cols == 128
                                   ? std::string()
                                   : fmt::format("{}x{}", w.block_rows, w.block_cols);
      if (w.scale && w.scale->entry->dtype == Dtype::kF8E8M0) return "fp8-block" + grid + "-ue8m0";
      if (w.scale && w.scale->entry->dtype == Dtype::kBF16) return "fp8-block" + grid + "-bf16";
      if (w.scale && w.scale->entry->dtype == Dtype::kF16) return "fp8-block" + grid + "-f16";
      return "fp8-block" + grid;
    }
    case SourceEncoding::kFp8Tensor:
      return "fp8-tensor";
    case SourceEncoding::kNvfp4:
      return w.global_divides ? "nvfp4-ct" : "nvfp4-modelopt";
    case SourceEncoding::kMxfp4:
      return "mxfp4";
    case SourceEncoding::kInt4Packed:
      return "int4-ct";
    case SourceEncoding::kMlxAffine:
      return "mlx-affine";
  }
  return "?";
}

std::string source_encodings_summary(const Recognized& r) {
  std::string out;
  for (const auto& [name, n] : r.encoding_counts)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", n, name);
  return out;
}

Result<Recognized> recognize_weights(const Checkpoint& ck, const MoeConfig* cfg,
                                     RecognizeWeights keep, RecognizeNames names) {
  Recognized out;
  if (cfg && cfg->block_rows > 0) {
    out.block_rows = cfg->block_rows;
    out.block_cols = cfg->block_cols;
  }
  if (cfg) {
    out.name_map = family(cfg->family).name_map;
  } else if (names == RecognizeNames::kDetect) {
    out.name_map = detect_name_map(ck);
    out.name_map_from_names = out.name_map != NameMap::kIdentity;
  }
  Recognizer rz(ck, cfg, out);
  rz.claim_all();
  Problems& problems = rz.problems();
  // One weight per tensor left (a fused expert tensor adds more): no doubling of a vector of
  // 100k weights.
  if (keep == RecognizeWeights::kKeep) {
    out.weights.reserve(ck.tensors().size() - std::min(rz.taken_count(), ck.tensors().size()));
  }

  for (const TensorRef t : ck.tensors()) {
    const std::string_view name = t.entry->name;
    if (rz.taken(name) || rz.failed(name)) continue;
    const Claim* claim = rz.claim(name);
    if (!claim && !is_float_source(t.entry->dtype)) {
      out.unclaimed.emplace_back(name, fmt::format("dtype {} is not a weight qrepack reads",
                                                   dtype_info(t.entry->dtype).safetensors));
      continue;
    }
    const std::span<const std::uint64_t> shape = t.entry->shape;
    const auto fused = shape.size() == 3 ? parse_fused_expert_name(name) : std::nullopt;
    if (fused) {
      QR_TRY(unfuse(ck, cfg, t, claim, *fused, problems, out, keep));
      continue;
    }
    if (shape.size() > 2) {
      out.unclaimed.emplace_back(
          name, fmt::format("{}-D tensor {} is not a known fused expert tensor", shape.size(),
                            shape_str(shape)));
      continue;
    }
    const std::string_view stored = claim ? claim->logical_base : name;
    const std::string mapped = *map_source_name(out.name_map, stored);
    const std::string_view logical = mapped == stored                   ? stored
                                     : keep == RecognizeWeights::kCount ? std::string_view(mapped)
                                                                        : out.names->copy(mapped);
    // FP4 packs two inputs per byte, int4 (CT) eight per word: the logical weight has that
    // many times the stored columns.
    WeightShape logical_shape(shape);
    if (claim) logical_shape[1] *= claim->col_factor;
    add(out, keep, make_weight(logical, logical_shape, t, claim, std::nullopt, 0));
  }
  // Sidecar-looking F32 tensors without an FP8 weight are ordinary tensors (the float pass
  // above already took them), so nothing else is left unaccounted for.
  if (!problems.empty()) return std::move(problems.to_error().in_file(ck.directory()));
  return out;
}

}  // namespace qrepack
