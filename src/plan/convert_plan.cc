#include "qrepack/plan/convert_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/problems.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/schemes/fp8_block.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr WeightClass kBitClasses[] = {WeightClass::kRoutedExpert, WeightClass::kSharedExpert,
                                       WeightClass::kAttention, WeightClass::kDenseMlp,
                                       WeightClass::kIo};

}  // namespace

const char* encoding_name(Encoding e, std::uint64_t group) {
  switch (e) {
    case Encoding::kInt4:
      return group ? "int4-group" : "int4-row";
    case Encoding::kInt8:
      return "int8-row";
    case Encoding::kBf16:
      return "bf16";
    case Encoding::kF32:
      return "f32";
    case Encoding::kFp8Block:
      return "fp8-block128";
    case Encoding::kRaw:
      return "raw";
  }
  return "?";
}

int class_bits(const ConvertOptions& o, WeightClass c) {
  const auto it = o.bits.find(c);
  if (it != o.bits.end()) return it->second;
  if (o.scheme.kind == SchemeKind::kInt8Row) return 8;
  return c == WeightClass::kIo ? 8 : 4;
}

Result<std::map<WeightClass, int>> parse_bits(const std::string& text, const Scheme& scheme) {
  std::map<WeightClass, int> out;
  if (text.empty()) return out;
  if (!scheme.has_bits()) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--bits does not apply to --to {}: only int4-row, int4-g<N> and "
                             "int8-row have per-class bit widths",
                             scheme.name()));
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::optional<WeightClass> cls;
    for (WeightClass c : kBitClasses) {
      if (key == weight_class_name(c)) cls = c;
    }
    if (!cls) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits: unknown class \"{}\" (classes: experts, shared, attn, "
                               "dense, io)",
                               key));
    }
    if (val != "4" && val != "8" && val != "16") {
      return Error(ErrorKind::kUsage, fmt::format("--bits {}: \"{}\" is not 4, 8 or 16", key, val));
    }
    if (out.contains(*cls)) {
      return Error(ErrorKind::kUsage, fmt::format("--bits sets {} twice", key));
    }
    out[*cls] = std::stoi(val);
  }
  return out;
}

Result<ConvertPlan> plan_conversion(const Checkpoint& ck, const ConvertOptions& o) {
  ConvertPlan plan;
  if (o.scheme.kind == SchemeKind::kE0m3Sfb) {
    return Error(ErrorKind::kUsage, "e0m3-sfb converts Omega packs (.pt), not checkpoints");
  }
  QR_ASSIGN_OR_RETURN(cfg, load_moe_config(ck.directory()));
  plan.config = cfg;
  if (!cfg && !o.skip_coverage) {
    return Error(ErrorKind::kInvalidConfig,
                 "no config.json beside the checkpoint: the coverage gate needs it to know which "
                 "tensors the engine loads (pass --no-coverage-gate to convert without it)")
        .in_file(ck.directory())
        .with_rule("coverage.config");
  }
  QR_ASSIGN_OR_RETURN(rec, recognize_weights(ck, cfg ? &*cfg : nullptr));
  plan.recognized = std::move(rec);
  const Recognized& r = plan.recognized;
  Problems problems;
  const RuleContext ctx{cfg ? cfg->num_hidden_layers : ~0ull, o.keep_mtp, o.keep_indexer};

  // Which source each logical weight came from, for the manifest.
  std::map<std::string, SourceRecord> sources;
  auto source = [&](const std::string& name) -> SourceRecord& {
    auto& s = sources[name];
    s.name = name;
    return s;
  };
  auto add_output = [&](PlanEntry& e, TensorSpec spec) {
    e.outputs.push_back(plan.outputs.size());
    plan.outputs.push_back(std::move(spec));
  };
  std::set<std::string> produced;
  std::set<std::string> user_dropped;
  std::set<std::string> failed;  ///< logical weights already reported as a problem

  for (const LogicalWeight& w : r.weights) {
    SourceRecord& src = source(w.source_name);
    const bool fused_slice = w.expert.has_value();
    if (fused_slice) src.disposition = "unfuse";
    if ((o.select && !o.select->search(w.name)) || (o.drop && o.drop->search(w.name))) {
      user_dropped.insert(w.name);
      if (!fused_slice) {
        src.disposition = "drop";
        src.rule = o.drop && o.drop->search(w.name) ? "user_drop" : "user_select";
      }
      continue;
    }
    const auto m = classify_weight(w.name, ctx);
    PlanEntry e;
    e.weight = &w;
    e.name = w.name;
    if (!m) {
      if (!o.keep_unknown) {
        problems.add(ErrorKind::kUnclaimedTensor,
                     fmt::format("tensor '{}': no rule of the glm_moe table claims it (pass "
                                 "--keep-unknown to copy it unchanged)",
                                 w.name));
        failed.insert(w.name);
        continue;
      }
      e.disposition = Disposition::kKeep;
      e.cls = WeightClass::kNorm;
      e.rule = "keep_unknown";
    } else {
      e.disposition = m->disposition;
      e.cls = m->rule->cls;
      e.rule = std::string(m->rule->name);
    }
    if (e.disposition == Disposition::kDrop) {
      if (!fused_slice) {
        src.disposition = "drop";
        src.rule = e.rule;
      }
      continue;
    }
    if (e.disposition == Disposition::kQuantize && o.unfuse_only) {
      e.disposition = Disposition::kKeep;
      e.rule = "unfuse_only";
    }
    if (e.disposition == Disposition::kKeep) {
      e.encoding = Encoding::kRaw;
      if (w.encoding == SourceEncoding::kFp8Block && fused_slice &&
          (w.row0 % r.block_rows != 0 || w.shape[0] % r.block_rows != 0)) {
        problems.add(ErrorKind::kUnexpectedShape,
                     fmt::format("tensor '{}': FP8 fused experts with {} rows per projection "
                                 "cannot be split bitwise on {}-row scale blocks; convert with "
                                 "--to bf16 (without --unfuse-experts) instead",
                                 w.source_name, w.shape[0], r.block_rows));
        failed.insert(w.name);
        continue;
      }
      add_output(e, {w.name, w.source_dtype, w.shape});
      if (w.encoding == SourceEncoding::kFp8Block) {
        add_output(e, {w.name + kScaleInvSuffix,
                       Dtype::kF32,
                       {ceil_div(w.shape[0], r.block_rows), ceil_div(w.shape[1], r.block_cols)}});
      }
    } else {
      if (w.shape.size() != 2) {
        problems.add(ErrorKind::kUnexpectedShape,
                     fmt::format("tensor '{}': rule {} quantizes 2-D weights but its shape has "
                                 "{} dimensions",
                                 w.name, e.rule, w.shape.size()));
        failed.insert(w.name);
        continue;
      }
      const std::uint64_t rows = w.shape[0], cols = w.shape[1];
      int bits = 0;
      switch (o.scheme.kind) {
        case SchemeKind::kBf16:
          e.encoding = Encoding::kBf16;
          break;
        case SchemeKind::kF32:
          e.encoding = Encoding::kF32;
          break;
        case SchemeKind::kFp8Block128:
          e.encoding = Encoding::kFp8Block;
          break;
        default:
          bits = class_bits(o, e.cls);
          if (bits == 16) {
            e.encoding = Encoding::kBf16;
          } else if (bits == 8) {
            e.encoding = Encoding::kInt8;
          } else {
            e.encoding = Encoding::kInt4;
            e.group = o.scheme.kind == SchemeKind::kInt4Group ? o.scheme.group : 0;
          }
      }
      switch (e.encoding) {
        case Encoding::kInt4: {
          const std::uint64_t g = e.group ? e.group : cols;
          add_output(e, {w.name, Dtype::kU8, {rows * ((cols + 1) / 2)}});
          add_output(e, {w.name + ".qs", Dtype::kF32, {rows * ceil_div(cols, g)}});
          break;
        }
        case Encoding::kInt8:
          add_output(e, {w.name, Dtype::kU8, {rows * cols}});
          add_output(e, {w.name + ".qs", Dtype::kF32, {rows}});
          break;
        case Encoding::kBf16:
          add_output(e, {w.name, Dtype::kBF16, w.shape});
          break;
        case Encoding::kF32:
          add_output(e, {w.name, Dtype::kF32, w.shape});
          break;
        case Encoding::kFp8Block:
          add_output(e, {w.name, Dtype::kF8E4M3, w.shape});
          add_output(
              e,
              {w.name + kScaleInvSuffix, Dtype::kF32, {ceil_div(rows, 128), ceil_div(cols, 128)}});
          break;
        case Encoding::kRaw:
          break;
      }
    }
    produced.insert(w.name);
    if (!fused_slice) {
      src.disposition = e.disposition == Disposition::kKeep ? "keep" : "convert";
      src.rule = e.rule;
    } else {
      src.rule = "experts.unfuse";
    }
    for (std::size_t i : e.outputs) src.outputs.push_back(plan.outputs[i].name);
    ++plan.class_counts[fmt::format(
        "{} {}", weight_class_name(e.cls),
        e.encoding == Encoding::kRaw ? std::string("keep") : encoding_name(e.encoding, e.group))];
    plan.entries.push_back(std::move(e));
  }
  for (const auto& [sidecar, weight] : r.consumed) {
    SourceRecord& s = source(sidecar);
    s.disposition = "consume";
    s.rule = "fp8_block.sidecar";
    s.outputs = {weight};
  }
  for (const auto& [name, why] : r.unclaimed) {
    if (!o.keep_unknown) {
      problems.add(
          ErrorKind::kUnclaimedTensor,
          fmt::format("tensor '{}': {} (pass --keep-unknown to copy it unchanged)", name, why));
      continue;
    }
    const TensorRef t = *ck.find(name);
    PlanEntry e;
    e.raw = t;
    e.name = name;
    e.disposition = Disposition::kKeep;
    e.cls = WeightClass::kNorm;
    e.rule = "keep_unknown";
    e.encoding = Encoding::kRaw;
    add_output(e, {name, t.entry->dtype, t.entry->shape});
    SourceRecord& s = source(name);
    s.disposition = "keep";
    s.rule = "keep_unknown";
    s.outputs = {name};
    plan.entries.push_back(std::move(e));
  }

  // Coverage gate: every tensor the engine loads for this config must be produced.
  if (cfg && !o.skip_coverage) {
    std::vector<std::string> missing;
    for_each_glm_moe_weight(*cfg, [&](const ModelWeight& mw) {
      if (mw.main_pass && !produced.contains(mw.name) && !user_dropped.contains(mw.name) &&
          !failed.contains(mw.name)) {
        missing.push_back(mw.name);
      }
    });
    if (!missing.empty()) {
      const std::size_t shown = std::min<std::size_t>(missing.size(), 50);
      problems.add(
          ErrorKind::kMissingTensors,
          fmt::format("coverage gate: {} tensor(s) the engine loads for this config are "
                      "missing from the source: {}{}",
                      missing.size(),
                      fmt::join(missing.begin(),
                                missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                      missing.size() > shown ? ", ..." : ""));
    }
  }

  // Scale validation (the scale tensors are small; weights are not touched).
  std::set<std::string> checked;
  for (const PlanEntry& e : plan.entries) {
    if (!e.weight || !e.weight->scale || checked.contains(e.weight->scale->entry->name)) continue;
    const TensorRef& s = *e.weight->scale;
    checked.insert(s.entry->name);
    std::vector<float> v(s.entry->byte_size() / 4);
    QR_TRY(ck.read(s, 0, std::span(reinterpret_cast<std::uint8_t*>(v.data()), v.size() * 4)));
    // Only the scale layout matters to the check: name entries [row, col] of the last dim.
    const std::uint64_t cols = s.entry->shape.back();
    const Fp8BlockShape layout{v.size() / cols, cols, 1, 1};
    auto st = fp8_block_check_scales(v, layout);
    if (!st.ok()) {
      problems.add(ErrorKind::kInvalidScale,
                   fmt::format("tensor '{}': {}", s.entry->name, st.error().message()));
    }
  }

  if (!problems.empty()) {
    return std::move(problems.to_error().in_file(ck.directory()));
  }
  for (auto& [name, s] : sources) {
    if (s.disposition.empty() || (s.disposition == "unfuse" && s.outputs.empty())) {
      s.disposition = "drop";  // every slice of a fused tensor was dropped
      s.rule = "all_slices_dropped";
    }
    plan.sources.push_back(std::move(s));
  }
  return plan;
}

}  // namespace qrepack
