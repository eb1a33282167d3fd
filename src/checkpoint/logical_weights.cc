#include "qrepack/checkpoint/logical_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

#include "core/problems.h"
#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

bool is_float_source(Dtype d) {
  return d == Dtype::kF16 || d == Dtype::kBF16 || d == Dtype::kF32 || d == Dtype::kF64;
}

std::string shape_str(const std::vector<std::uint64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

struct FusedExpertName {
  std::string layer;  ///< the layer index as written
  bool gate_up;       ///< gate_up_proj (else down_proj)
};

// model.layers.<digits>.mlp.experts.{gate_up_proj,down_proj}, parsed without a regex engine.
std::optional<FusedExpertName> parse_fused_expert_name(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.", kMid = ".mlp.experts.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || !parse_decimal(name.substr(0, dot))) return std::nullopt;
  const std::string_view layer = name.substr(0, dot), rest = name.substr(dot);
  if (!rest.starts_with(kMid)) return std::nullopt;
  const std::string_view proj = rest.substr(kMid.size());
  if (proj != "gate_up_proj" && proj != "down_proj") return std::nullopt;
  return FusedExpertName{std::string(layer), proj == "gate_up_proj"};
}

}  // namespace

Result<Recognized> recognize_weights(const Checkpoint& ck, const MoeConfig* cfg) {
  Recognized out;
  if (cfg && cfg->block_rows > 0) {
    out.block_rows = cfg->block_rows;
    out.block_cols = cfg->block_cols;
  }
  Problems problems;
  std::unordered_set<std::string> sidecars;

  for (const TensorRef& t : ck.tensors()) {
    const std::string& name = t.entry->name;
    if (t.entry->dtype != Dtype::kF8E4M3) continue;
    const auto s = ck.find(name + kScaleInvSuffix);
    if (!s) {
      problems.add(ErrorKind::kMissingScale,
                   fmt::format("tensor '{}': F8_E4M3 weight has no '{}{}' (rule fp8_block.sidecar)",
                               name, name, kScaleInvSuffix));
      continue;
    }
    const auto& ws = t.entry->shape;
    std::vector<std::uint64_t> want = ws;
    if (ws.size() >= 2) {
      want[ws.size() - 2] = (ws[ws.size() - 2] + out.block_rows - 1) / out.block_rows;
      want[ws.size() - 1] = (ws[ws.size() - 1] + out.block_cols - 1) / out.block_cols;
    }
    if (ws.size() < 2 || ws.size() > 3 || s->entry->dtype != Dtype::kF32 ||
        s->entry->shape != want) {
      problems.add(ErrorKind::kScaleShapeMismatch,
                   fmt::format("tensor '{}': {} {} does not fit weight {} with {}x{} blocks "
                               "(expected F32 {}) (rule fp8_block.scale_shape)",
                               s->entry->name, dtype_info(s->entry->dtype).safetensors,
                               shape_str(s->entry->shape), shape_str(ws), out.block_rows,
                               out.block_cols, shape_str(want)));
      continue;
    }
    sidecars.insert(s->entry->name);
    out.consumed.emplace_back(s->entry->name, name);
  }

  for (const TensorRef& t : ck.tensors()) {
    const std::string& name = t.entry->name;
    if (sidecars.contains(name)) continue;
    const Dtype dt = t.entry->dtype;
    const bool fp8 = dt == Dtype::kF8E4M3;
    if (fp8 && !ck.find(name + kScaleInvSuffix)) continue;  // reported above
    if (!fp8 && !is_float_source(dt)) {
      out.unclaimed.emplace_back(
          name, fmt::format("dtype {} is not a weight qrepack reads", dtype_info(dt).safetensors));
      continue;
    }
    const auto scale = fp8 ? ck.find(name + kScaleInvSuffix) : std::nullopt;
    if (fp8 && !sidecars.contains(name + kScaleInvSuffix)) continue;  // bad scale, reported
    const SourceEncoding enc = fp8 ? SourceEncoding::kFp8Block : SourceEncoding::kFloat;
    const auto& shape = t.entry->shape;
    const auto fused = shape.size() == 3 ? parse_fused_expert_name(name) : std::nullopt;
    if (fused) {
      const std::string& layer = fused->layer;
      const bool gate_up = fused->gate_up;
      const std::uint64_t e_count = shape[0];
      std::uint64_t rows = gate_up ? shape[1] / 2 : shape[1];
      if (gate_up && shape[1] % 2 != 0) {
        problems.add(ErrorKind::kUnexpectedShape,
                     fmt::format("tensor '{}': fused gate_up {} has an odd row count "
                                 "(rule experts.fused_shape)",
                                 name, shape_str(shape)));
        continue;
      }
      if (cfg) {
        const std::uint64_t m_rows = cfg->moe_intermediate_size, d = cfg->hidden_size;
        const std::vector<std::uint64_t> want =
            gate_up ? std::vector<std::uint64_t>{cfg->n_routed_experts, 2 * m_rows, d}
                    : std::vector<std::uint64_t>{cfg->n_routed_experts, d, m_rows};
        if (shape != want) {
          problems.add(ErrorKind::kUnexpectedShape,
                       fmt::format("tensor '{}': fused experts {} but config.json implies {} "
                                   "(rule experts.fused_shape)",
                                   name, shape_str(shape), shape_str(want)));
          continue;
        }
      }
      // Unfusing multiplies one file tensor into 2E weights: bounded like a config's count.
      if (rows == 0 || shape[2] == 0 || e_count > kMaxModelWeights ||
          out.weights.size() + 2 * e_count > kMaxModelWeights) {
        return Error(ErrorKind::kLimitExceeded,
                     fmt::format("fused experts {} would make more than {} weights, or an empty "
                                 "expert",
                                 shape_str(shape), kMaxModelWeights))
            .in_file(ck.directory())
            .in_tensor(name)
            .with_rule("experts.max_weights");
      }
      for (std::uint64_t e = 0; e < e_count; ++e) {
        const std::string base = fmt::format("model.layers.{}.mlp.experts.{}.", layer, e);
        auto add = [&](const char* proj, std::uint64_t row0) {
          LogicalWeight w{base + proj, {rows, shape[2]}, enc, dt, t, scale, e, row0, name};
          out.weights.push_back(std::move(w));
        };
        if (gate_up) {
          add("gate_proj.weight", 0);  // gate = the first M rows (reference/colibri.md §2.1)
          add("up_proj.weight", rows);
        } else {
          add("down_proj.weight", 0);
        }
      }
      continue;
    }
    if (shape.size() > 2) {
      out.unclaimed.emplace_back(
          name, fmt::format("{}-D tensor {} is not a known fused expert tensor", shape.size(),
                            shape_str(shape)));
      continue;
    }
    out.weights.push_back({name, shape, enc, dt, t, scale, std::nullopt, 0, name});
  }
  // Sidecar-looking F32 tensors without an FP8 weight are ordinary tensors (the float pass
  // above already took them), so nothing else is left unaccounted for.
  if (!problems.empty()) return std::move(problems.to_error().in_file(ck.directory()));
  return out;
}

}  // namespace qrepack
