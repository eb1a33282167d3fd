#include "qrepack/plan/convert_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/problems.h"
#include "io/json_strict.h"
#include "plan/glm_layout.h"
#include "plan/plan_outputs.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/name_index.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/schemes/fp8_block.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::array kBitClasses = {
    WeightClass::kRoutedExpert, WeightClass::kSharedExpert, WeightClass::kAttention,
    WeightClass::kOProj,        WeightClass::kKvB,          WeightClass::kDenseMlp,
    WeightClass::kIo,           WeightClass::kMtp,          WeightClass::kIndexer};
constexpr std::array kProjections = {ExpertProjection::kGate, ExpertProjection::kUp,
                                     ExpertProjection::kDown};

// The bits a scheme gives every class, and io.
std::pair<int, int> scheme_default_bits(SchemeKind k) {
  switch (k) {
    case SchemeKind::kInt8Row:
      return {8, 8};
    case SchemeKind::kInt2Row:
      return {2, 8};
    case SchemeKind::kInt3G64:
      return {3, 8};
    default:
      return {4, 8};
  }
}

}  // namespace

const char* encoding_name(Encoding e, std::uint64_t group) {
  switch (e) {
    case Encoding::kInt4:
      return group ? "int4-group" : "int4-row";
    case Encoding::kInt8:
      return "int8-row";
    case Encoding::kInt2:
      return "int2-row";
    case Encoding::kInt3:
      return "int3-g64";
    case Encoding::kE8:
      return "e8-iq3";
    case Encoding::kFp8Container:
      return "fp8-passthrough";
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

std::string entry_encoding_name(const PlanEntry& e) {
  std::string n = encoding_name(e.encoding, e.group);
  if (e.encoding == Encoding::kInt4 && e.bits == 2) n += "-2bit";
  return n;
}

std::span<const WeightClass> bit_classes() { return kBitClasses; }

std::string bits_label(int bits) { return bits == kE8Bits ? "e8" : std::to_string(bits); }

const char* expert_projection_name(ExpertProjection p) {
  switch (p) {
    case ExpertProjection::kGate:
      return "gate";
    case ExpertProjection::kUp:
      return "up";
    case ExpertProjection::kDown:
      return "down";
  }
  return "?";
}

int class_bits(const ConvertOptions& o, WeightClass c) {
  const auto it = o.bits.classes.find(c);
  if (it != o.bits.classes.end()) return it->second;
  const auto [all, io] = scheme_default_bits(o.scheme.kind);
  return c == WeightClass::kIo ? io : all;
}

int projection_bits(const ConvertOptions& o, ExpertProjection p) {
  const auto it = o.bits.projections.find(p);
  return it != o.bits.projections.end() ? it->second : class_bits(o, WeightClass::kRoutedExpert);
}

std::vector<std::pair<std::string_view, int>> resolved_bit_widths(const ConvertOptions& o) {
  std::vector<std::pair<std::string_view, int>> out;
  if (!o.scheme.has_bits()) return out;
  for (WeightClass c : kBitClasses) out.emplace_back(weight_class_name(c), class_bits(o, c));
  for (ExpertProjection p : kProjections) {
    out.emplace_back(expert_projection_name(p), projection_bits(o, p));
  }
  return out;
}

int weight_bits(const ConvertOptions& o, WeightClass c, std::string_view name) {
  if (c == WeightClass::kRoutedExpert) {  // the first projection whose name it carries
    for (ExpertProjection p : kProjections) {
      if (name.find(fmt::format(".{}_proj.weight", expert_projection_name(p))) !=
          std::string_view::npos) {
        return projection_bits(o, p);
      }
    }
  }
  return class_bits(o, c);
}

namespace {

// E8 covers gate, up and down together or none of them (the engine rotates one gathered input
// row for gate and up; the engine converter's rule).
Status check_e8_projections(const BitWidths& b) {
  const auto experts = b.classes.find(WeightClass::kRoutedExpert);
  std::string got;
  int e8 = 0;
  for (ExpertProjection p : kProjections) {
    const auto it = b.projections.find(p);
    const int bits = it != b.projections.end()    ? it->second
                     : experts != b.classes.end() ? experts->second
                                                  : 0;
    e8 += bits == kE8Bits ? 1 : 0;
    got += fmt::format("{}{}={}", got.empty() ? "" : ", ", expert_projection_name(p),
                       bits ? bits_label(bits) : "default");
  }
  if (e8 == 0 || e8 == 3) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("--bits: e8 covers gate, up and down together or none of them (got "
                           "{}); use --bits experts=e8",
                           got));
}

}  // namespace

Result<BitWidths> parse_bits(const std::string& text, const Scheme& scheme) {
  BitWidths out;
  if (text.empty()) return out;
  if (!scheme.has_bits()) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--bits does not apply to --to {}: only int4-row, int4-g<N>, "
                             "int8-row, int2-row and int3-g64 have per-class bit widths",
                             scheme.name()));
  }
  std::stringstream ss(text);
  std::string item;
  std::set<std::string> seen;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::optional<WeightClass> cls;
    std::optional<ExpertProjection> proj;
    for (WeightClass c : kBitClasses) {
      if (key == weight_class_name(c)) cls = c;
    }
    for (ExpertProjection p : kProjections) {
      if (key == expert_projection_name(p)) proj = p;
    }
    if (!cls && !proj) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits: unknown name \"{}\" (classes: experts, shared, attn, "
                               "o_proj, kv_b, dense, io, mtp, indexer; routed projections: gate, "
                               "up, down)",
                               key));
    }
    const bool e8 = val == "e8";
    if (e8 && !proj && *cls != WeightClass::kRoutedExpert) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits {}=e8: E8/IQ3 (fmt 6) is for the routed experts only "
                               "(experts, gate, up, down)",
                               key));
    }
    if (!e8 && val != "2" && val != "3" && val != "4" && val != "8" && val != "16") {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits {}: \"{}\" is not 2, 3, 4, 8, 16{}", key, val,
                               cls && *cls != WeightClass::kRoutedExpert ? "" : " or e8"));
    }
    if (!seen.insert(key).second) {
      return Error(ErrorKind::kUsage, fmt::format("--bits sets {} twice", key));
    }
    const int b = e8 ? kE8Bits : std::stoi(val);
    if (cls) {
      out.classes[*cls] = b;
    } else {
      out.projections[*proj] = b;
    }
  }
  QR_TRY(check_e8_projections(out));
  return out;
}

const char* source_disposition_name(SourceDisposition d) {
  switch (d) {
    case SourceDisposition::kConvert:
      return "convert";
    case SourceDisposition::kKeep:
      return "keep";
    case SourceDisposition::kConsume:
      return "consume";
    case SourceDisposition::kDrop:
      return "drop";
    case SourceDisposition::kUnfuse:
      return "unfuse";
    case SourceDisposition::kUnset:
      break;
  }
  return "drop";
}

namespace {

using SD = SourceDisposition;

// A plan holds one of each per output, entry and source tensor: kept small, a plan of a
// 100k-tensor checkpoint costs about as much memory as one of 4k (docs/performance.md).
static_assert(sizeof(TensorView) <= 40);
static_assert(sizeof(PlanEntry) <= 80);
static_assert(sizeof(SourceRecord) <= 32);

/// A weight's rule decision: what the family's table (or a user flag) says about it.
struct Decision {
  Disposition disposition;
  WeightClass cls;
  std::string_view rule;
};

// Builds a plan in four steps per weight: classify (family rules and user flags) -> choose the
// encoding (scheme and per-class bits) -> name the outputs (by the encoding) -> record the
// source; then validate the whole (coverage, scales).
class PlanBuilder {
 public:
  PlanBuilder(const Checkpoint& ck, const ConvertOptions& o, ConvertPlan& plan)
      : ck_(ck), o_(o), plan_(plan), sources_(ck.tensors().size()) {
    const MoeConfig* cfg = plan.config ? &*plan.config : nullptr;
    ctx_ = RuleContext{family_rules(cfg), cfg ? cfg->num_hidden_layers : ~0ull, o.keep_mtp,
                       o.keep_indexer, o.pass};
    table_ = plan.family ? std::string(plan.family->name) : std::string("name-rule");
    // Held for the whole run: sized once for one entry per weight, and the data and scale
    // outputs of each (one output under bf16 / f32), rather than grown by doubling.
    const std::size_t weights = plan.recognized.weights.size();
    const bool float_out = o.scheme.kind == SchemeKind::kBf16 || o.scheme.kind == SchemeKind::kF32;
    plan.entries.reserve(weights);
    plan.outputs.reserve(float_out ? weights : 2 * weights);
  }

  void add_weight(const LogicalWeight& w) {
    SourceRecord& src = source(w.source_name());
    const bool slice = w.expert.has_value();
    if (slice) src.disposition = SD::kUnfuse;
    const auto d = classify(w);
    if (!d) return;
    if (d->disposition == Disposition::kDrop) {
      if (!slice) set(src, SD::kDrop, d->rule);
      return;
    }
    PlanEntry e;
    e.weight = &w;
    e.name = w.name;
    e.disposition = d->disposition;
    e.cls = d->cls;
    e.rule = d->rule;
    if (layout_.keeps_io_as_stored(e, w)) e.disposition = Disposition::kKeep;
    if (e.disposition == Disposition::kKeep) {
      if (!keep(e, w)) return;
    } else {
      if (!check_2d(w, e.rule)) return;
      layout_.choose_encoding(e, w);
      layout_.add_encoded_outputs(e, w);
      if (!layout_.reads_back_as_written(e, w)) {
        failed_.insert(w.name);
        return;
      }
    }
    if (slice) {
      src.rule = rule_id("experts.unfuse");
    } else {
      set(src, e.disposition == Disposition::kKeep ? SD::kKeep : SD::kConvert, e.rule);
    }
    finish_entry(std::move(e), src);
  }

  void add_unclaimed(const std::string& name, const std::string& why) {
    if (!o_.keep_unknown) {
      problems_.add(
          ErrorKind::kUnclaimedTensor,
          fmt::format("tensor '{}': {} (pass --keep-unknown to copy it unchanged)", name, why));
      return;
    }
    const TensorRef t = *ck_.find(name);
    PlanEntry e = raw_entry(t, t.entry->name, "keep_unknown");
    SourceRecord& s = source(name);
    set(s, SD::kKeep, "keep_unknown");
    finish_entry(std::move(e), s);
  }

  void add_consumed(std::string_view sidecar, std::string_view weight) {
    SourceRecord& s = source(sidecar);
    if (s.disposition == SD::kKeep) return;  // copied with a kept weight
    set(s, SD::kConsume, "sidecar");
    s.consumed_by = weight;
  }

  void add_dropped(std::string_view name, std::string_view rule) {
    set(source(name), SD::kDrop, rule);
  }

  // Every tensor a loader expects for this config must be produced (or dropped by the user):
  // the main pass's list, or the MTP head's, or the indexer's.
  void check_coverage(const MoeConfig& cfg) {
    std::vector<std::string> missing;
    const auto in_pass = [&](const ModelWeight& mw) {
      return o_.pass == ConvertPass::kMain ? mw.main_pass
                                           : !mw.main_pass && pass_converts(mw.name, ctx_);
    };
    // A weight is produced when an entry converts or keeps it (4 bytes per entry, no set of
    // names); raw entries (kept sidecars, --keep-unknown) produce no weight.
    const auto& entries = plan_.entries;
    const auto name_of = [&](std::size_t i) { return entries[i].name; };
    const NameIndex by_name = NameIndex::build(entries.size(), name_of);
    const auto produced = [&](std::string_view name) {
      const auto i = by_name.find(name, name_of);
      return i && entries[*i].weight != nullptr;
    };
    for_each_model_weight(cfg, [&](const ModelWeight& mw) {
      if (in_pass(mw) && !produced(mw.name) && !user_dropped_.contains(mw.name) &&
          !failed_.contains(mw.name)) {
        missing.push_back(mw.name);
      }
    });
    if (missing.empty()) return;
    const std::size_t shown = std::min<std::size_t>(missing.size(), 50);
    problems_.add(
        ErrorKind::kMissingTensors,
        fmt::format(
            "coverage gate ({}): {} tensor(s) the engine loads for this config are "
            "missing from the source: {}{}",
            table_, missing.size(),
            fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
            missing.size() > shown ? ", ..." : ""));
  }

  // Block and per-tensor scales are small: all are read and checked before any weight is.
  // NVFP4's per-16 scales, MXFP4's per-32 exponents and int4 (CT)'s group scales are checked as
  // their rows are decoded.
  Status check_scales() {
    std::set<std::string_view> checked;
    for (const PlanEntry& e : plan_.entries) {
      if (!e.weight || !e.weight->scale) continue;
      const SourceEncoding se = e.weight->encoding;
      if (se != SourceEncoding::kFp8Block && se != SourceEncoding::kFp8Tensor) continue;
      const TensorRef& s = *e.weight->scale;
      if (!checked.insert(s.entry->name).second) continue;
      std::vector<float> v;
      QR_TRY(
          WeightReader::read_block_scales(ck_, s, 0, checked_numel(s.entry->shape).value_or(0), v));
      const std::uint64_t cols = s.entry->shape.empty() ? 1 : s.entry->shape.back();
      auto st = fp8_block_check_scales(v, Fp8BlockShape{v.size() / cols, cols, 1, 1});
      if (!st.ok()) {
        problems_.add(ErrorKind::kInvalidScale,
                      fmt::format("tensor '{}': {} (rule {})", s.entry->name, st.error().message(),
                                  st.error().rule()));
      }
    }
    return ok_status();
  }

  Status finish() {
    if (o_.pass != ConvertPass::kMain && plan_.entries.empty()) {
      problems_.add(ErrorKind::kMissingTensors,
                    fmt::format("--{}: the source holds no tensor this pass converts",
                                convert_pass_name(o_.pass)));
    }
    if (!problems_.empty()) return std::move(problems_.to_error().in_file(ck_.directory()));
    for (SourceRecord& s : sources_) {
      if (!s.recorded) {  // not reachable: the recognizer accounts for every tensor
        return Error(ErrorKind::kInternal, "a source tensor has no record in the plan");
      }
      if (s.disposition == SD::kUnset || (s.disposition == SD::kUnfuse && s.outputs.empty())) {
        set(s, SD::kDrop, "all_slices_dropped");  // every slice of a fused tensor was dropped
      }
    }
    plan_.sources = std::move(sources_);
    return ok_status();
  }

 private:
  // The record of source tensor `name` (a checkpoint name: the recognizer's names are).
  SourceRecord& source(std::string_view name) {
    const auto i = ck_.index_of(name);
    if (!i) {  // not reachable: every name the plan records comes from the checkpoint
      problems_.add(ErrorKind::kInternal, fmt::format("tensor '{}': not in the source", name));
      return stray_;
    }
    SourceRecord& s = sources_[*i];
    s.recorded = true;
    return s;
  }
  void set(SourceRecord& s, SD d, std::string_view rule) {
    s.disposition = d;
    s.rule = rule_id(rule);
  }
  std::uint16_t rule_id(std::string_view rule) {
    if (const auto it = rule_ids_.find(rule); it != rule_ids_.end()) return it->second;
    if (plan_.rule_names.size() > std::numeric_limits<std::uint16_t>::max()) {
      problems_.add(ErrorKind::kInternal, "over 65535 rule names");  // static names: dozens
      return 0;
    }
    const auto id = static_cast<std::uint16_t>(plan_.rule_names.size());
    rule_ids_.emplace(rule, id);
    plan_.rule_names.push_back(rule);
    return id;
  }

  // Step 1: user selection, then the family's rule table, then the --unfuse-experts override.
  std::optional<Decision> classify(const LogicalWeight& w) {
    const bool by_drop = o_.drop && o_.drop->search(w.name);
    if ((o_.select && !o_.select->search(w.name)) || by_drop) {
      user_dropped_.insert(w.name);
      if (!w.expert) set(source(w.source_name()), SD::kDrop, by_drop ? "user_drop" : "user_select");
      return std::nullopt;
    }
    const auto m = classify_weight(w.name, ctx_);
    Decision d{Disposition::kKeep, WeightClass::kNorm, "keep_unknown"};
    if (m) {
      d = {m->disposition, m->rule->cls, m->rule->name};
    } else if (!o_.keep_unknown) {
      problems_.add(ErrorKind::kUnclaimedTensor,
                    fmt::format("tensor '{}': no rule of the {} table claims it (pass "
                                "--keep-unknown to copy it unchanged)",
                                w.name, table_));
      failed_.insert(w.name);
      return std::nullopt;
    }
    if (d.disposition == Disposition::kQuantize && o_.unfuse_only) {
      d.disposition = Disposition::kKeep;
      d.rule = "unfuse_only";
    }
    return d;
  }

  bool check_2d(const LogicalWeight& w, std::string_view rule) {
    if (w.shape.size() == 2) return true;
    problems_.add(ErrorKind::kUnexpectedShape,
                  fmt::format("tensor '{}': rule {} quantizes 2-D weights but its shape has {} "
                              "dimensions",
                              w.name, rule, w.shape.size()));
    failed_.insert(w.name);
    return false;
  }

  // A kept weight is copied bitwise: a float tensor as itself; a quantized one with its
  // sidecars (each its own raw entry, under the family's names); an FP8 expert slice of a fused
  // tensor through the reader, with its rows' scales.
  bool keep(PlanEntry& e, const LogicalWeight& w) {
    e.encoding = Encoding::kRaw;
    if (!w.expert) {
      if (w.encoding == SourceEncoding::kFloat) {
        add_output(e, {w.name, w.source_dtype, w.shape});
        return true;
      }
      if (!engine_loads_as_stored(e, w)) return false;
      for (const TensorRef& side : w.sidecars()) {
        PlanEntry se = raw_entry(side, mapped_name(side.entry->name), e.rule);
        se.cls = e.cls;
        SourceRecord& s = source(side.entry->name);
        set(s, SD::kKeep, e.rule);
        finish_entry(std::move(se), s);
      }
      add_output(e, {mapped_name(w.source_name()), w.source_dtype, w.data.entry->shape});
      return true;
    }
    if (w.encoding == SourceEncoding::kFp8Block &&
        (w.row0 % w.block_rows != 0 || w.shape[0] % w.block_rows != 0)) {
      problems_.add(ErrorKind::kUnexpectedShape,
                    fmt::format("tensor '{}': FP8 fused experts with {} rows per projection "
                                "cannot be split bitwise on {}-row scale blocks; convert with "
                                "--to bf16 (without --unfuse-experts) instead",
                                w.source_name(), w.shape[0], w.block_rows));
      failed_.insert(w.name);
      return false;
    }
    add_output(e, {w.name, w.source_dtype, w.shape});
    if (w.encoding == SourceEncoding::kFp8Block) {
      add_output(e, {outputs_.suffixed(w.name, kScaleInvSuffix), Dtype::kF32,
                     outputs_.dims({ceil_div(w.shape[0], w.block_rows),
                                    ceil_div(w.shape[1], w.block_cols)})});
    }
    return true;
  }

  // The engine loads a kept quantized weight only as FP8 with its 128x128 block scales
  // (reference/colibri.md §3.1, check_load): per-tensor FP8 and NVFP4 kept as stored by a rule
  // of an engine conversion (--keep-mtp, --keep-indexer) would be refused by the check-load
  // that follows, after the output exists, so the plan refuses them first while the coverage
  // gate (which runs that check) is on. --unfuse-experts is a bitwise copy by request: it
  // writes them and check-load reports them.
  bool engine_loads_as_stored(const PlanEntry& e, const LogicalWeight& w) {
    if (!plan_.config || o_.skip_coverage || o_.unfuse_only ||
        w.encoding == SourceEncoding::kFp8Block) {
      return true;
    }
    const bool mtp = e.rule == "mtp_layer";
    const bool indexer = e.rule == "dsa_indexer";
    const std::string who = mtp       ? std::string("--keep-mtp")
                            : indexer ? std::string("--keep-indexer")
                                      : fmt::format("rule {}", e.rule);
    const std::string instead = mtp || indexer ? fmt::format(
                                                     "convert it with {} in a run of its "
                                                     "own instead, or ",
                                                     mtp ? "--mtp" : "--indexer")
                                               : std::string();
    problems_.add(ErrorKind::kUnloadableLayout,
                  fmt::format("tensor '{}': {} keeps it as stored ({}), which the engine cannot "
                              "load (kept weights load only as float or fp8-block); {}pass "
                              "--no-coverage-gate to keep it anyway (rule keep.engine_loadable)",
                              w.source_name(), who, source_encoding_name(w), instead));
    failed_.insert(w.name);
    return false;
  }

  // `out_name` views the checkpoint or the plan's arena (mapped_name).
  PlanEntry raw_entry(const TensorRef& t, std::string_view out_name, std::string_view rule) {
    PlanEntry e;
    e.raw = t;
    e.name = out_name;
    e.disposition = Disposition::kKeep;
    e.cls = WeightClass::kNorm;
    e.rule = rule;
    e.encoding = Encoding::kRaw;
    add_output(e, {out_name, t.entry->dtype, t.entry->shape});
    return e;
  }

  // What the plan's names and shapes view besides the checkpoint and the weights: one arena.
  std::string_view mapped_name(std::string_view source) { return outputs_.mapped_name(source); }
  void add_output(PlanEntry& e, TensorView spec) { outputs_.add_output(e, std::move(spec)); }
  // Step 4: record the outputs against the source and count the class.
  void finish_entry(PlanEntry e, SourceRecord& src) {
    for (std::size_t i : e.outputs) {
      if (!src.outputs.extend(i)) {
        problems_.add(ErrorKind::kInternal,
                      fmt::format("tensor '{}': its outputs are not consecutive", e.name));
      }
    }
    ++plan_.class_counts[fmt::format(
        "{} {}", weight_class_name(e.cls),
        e.encoding == Encoding::kRaw ? std::string("keep") : entry_encoding_name(e))];
    plan_.stamped += e.stamped;
    plan_.entries.push_back(std::move(e));
  }

  const Checkpoint& ck_;
  const ConvertOptions& o_;
  ConvertPlan& plan_;
  RuleContext ctx_;
  std::string table_;
  Problems problems_;
  PlanOutputs outputs_{plan_, problems_};
  GlmLayout layout_{o_, outputs_};     ///< the target side: encodings, outputs, collisions
  std::vector<SourceRecord> sources_;  ///< per checkpoint tensor; named once recorded
  SourceRecord stray_;
  /// Logical weight names (views of plan_.recognized's, which no longer move).
  std::set<std::string_view> user_dropped_, failed_;
  std::unordered_map<std::string_view, std::uint16_t> rule_ids_;
};

}  // namespace

bool OutputRun::extend(std::size_t i) {
  if (count == 0) {
    first = static_cast<std::uint32_t>(i);
  } else if (i != std::size_t{first} + count) {
    return false;
  }
  ++count;
  return true;
}

std::string plan_family_line(const ConvertPlan& plan) {
  const std::string enc = source_encodings_summary(plan.recognized);
  const std::string map =
      plan.recognized.name_map == NameMap::kMiniMax
          ? fmt::format("; names mapped as MiniMax{}",
                        plan.recognized.name_map_from_names ? " (chosen from tensor names)" : "")
          : "";
  if (!plan.family) {
    return fmt::format("none (name rules alone, no coverage checked){}; source encodings: {}", map,
                       enc);
  }
  return fmt::format("{} ({}), model_type {}; coverage {}{}; source encodings: {}",
                     plan.family->name, plan.family->title, plan.config->model_type,
                     plan.coverage_checked ? "checked" : "not checked (--no-coverage-gate)", map,
                     enc);
}

Result<ConvertPlan> plan_conversion(const Checkpoint& ck, const ConvertOptions& o) {
  ConvertPlan plan;
  if (o.scheme.kind == SchemeKind::kE0m3Sfb) {
    return Error(ErrorKind::kUsage, "e0m3-sfb converts Omega packs (.pt), not checkpoints");
  }
  auto cfg = load_moe_config(ck.directory());
  if (!cfg.ok() && o.skip_coverage && cfg.error().kind() == ErrorKind::kUnsupportedModel) {
    // An unknown family converts by name rules alone when the gate is off; recorded.
    plan.warnings.push_back(
        fmt::format("{}: {}; converting by name rules alone, no coverage "
                    "checked (--no-coverage-gate)",
                    cfg.error().file(), cfg.error().message()));
    cfg = std::optional<MoeConfig>{};
  }
  if (!cfg.ok()) return std::move(cfg).error();
  plan.config = *cfg;
  if (!plan.config && !o.skip_coverage) {
    return Error(ErrorKind::kInvalidConfig,
                 "no config.json beside the checkpoint: the coverage gate needs it to know which "
                 "tensors the engine loads (pass --no-coverage-gate to convert without it)")
        .in_file(ck.directory())
        .with_rule("coverage.config");
  }
  plan.family = plan.config ? &family(plan.config->family) : nullptr;
  for (const std::string& w : ck.warnings()) plan.warnings.push_back(w);
  QR_ASSIGN_OR_RETURN(rec, recognize_weights(ck, plan.config ? &*plan.config : nullptr));
  plan.recognized = std::move(rec);
  PlanBuilder b(ck, o, plan);
  const Recognized& r = plan.recognized;
  for (const LogicalWeight& w : r.weights) b.add_weight(w);
  for (const auto& [sidecar, weight] : r.consumed) b.add_consumed(sidecar, weight);
  for (const auto& [name, rule] : r.dropped) b.add_dropped(name, rule);
  for (const auto& [name, why] : r.unclaimed) b.add_unclaimed(name, why);
  plan.coverage_checked = plan.config && !o.skip_coverage;
  if (plan.coverage_checked) b.check_coverage(*plan.config);
  if (!o.defer_scale_checks) QR_TRY(b.check_scales());
  QR_TRY(b.finish());
  // Every source record now holds what recognition's lists said; the plan keeps the records.
  // (Assigning {} would keep their capacity: they are replaced by empty ones.)
  Recognized& done = plan.recognized;
  done.consumed = decltype(done.consumed)();
  done.dropped = decltype(done.dropped)();
  done.unclaimed = decltype(done.unclaimed)();
  return plan;
}

}  // namespace qrepack
