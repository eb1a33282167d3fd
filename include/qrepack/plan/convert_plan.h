// plan + validate for `convert`: every logical weight gets a disposition and exact output
// tensors (names, dtypes, shapes, byte sizes) before any tensor data is read; every raw source
// tensor is accounted for (converted, kept, consumed as a sidecar, or dropped by a named rule);
// all problems are collected and reported together.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/core/error.h"
#include "qrepack/core/name_pattern.h"
#include "qrepack/core/progress.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/safetensors_writer.h"
#include "qrepack/plan/rules.h"
#include "qrepack/schemes/scheme.h"
#include "qrepack/targets/target.h"

namespace qrepack {

/// How one output weight is encoded.
enum class Encoding : std::uint8_t {
  kInt4,          ///< packed nibbles + .qs (group 0 = per row); bits 4 (qmax 7) or 2 (qmax 1)
  kInt8,          ///< int8 per row + .qs
  kInt2,          ///< int2 per row + .qs (engine fmt 3)
  kInt3,          ///< int3-g64 + .qs (engine fmt 5)
  kE8,            ///< E8/IQ3 rows + .qs [1] = 6.0 (engine fmt 6; routed experts)
  kFp8Container,  ///< E4M3 codes U8 [O, I] + f32 128x128 block scales as .qs (engine fmt 8)
  kBf16,
  kF32,
  kFp8Block,  ///< F8_E4M3 + _scale_inv
  kRaw,       ///< the source bytes unchanged (kept tensors, bitwise unfusing)
};

const char* encoding_name(Encoding e, std::uint64_t group);

/// A routed expert's projection, for per-projection bits.
enum class ExpertProjection : std::uint8_t { kGate, kUp, kDown };

/// The --bits value "e8": E8/IQ3 (engine fmt 6), for routed experts only; not a bit width.
inline constexpr int kE8Bits = 6;
/// "e8" for kE8Bits, else the number.
std::string bits_label(int bits);

/// --bits overrides: per class, and per projection of the routed experts (2, 3, 4, 8, 16, or
/// kE8Bits for experts, gate, up and down).
struct BitWidths {
  std::map<WeightClass, int> classes;
  std::map<ExpertProjection, int> projections;
};

struct ConvertOptions {
  /// The container written: colibri-glm or generic (the GLM-style layout); recorded.
  const Target* target = nullptr;
  Scheme scheme{SchemeKind::kInt4Group, 128};
  BitWidths bits;
  ConvertPass pass = ConvertPass::kMain;  ///< --mtp, --indexer
  std::optional<NamePattern> select;
  std::optional<NamePattern> drop;
  bool keep_unknown = false;
  bool keep_mtp = false;
  bool keep_indexer = false;
  bool unfuse_only = false;  ///< --unfuse-experts: split fused experts, change nothing else
  bool skip_coverage = false;
  /// Block scales checked as each weight is read instead of all before any (a remote source:
  /// reading every shard's scales first would start every shard's download at once).
  bool defer_scale_checks = false;
  std::uint64_t max_shard_bytes = 5'000'000'000ull;
  /// Work unit of the converter, in bytes of decoded f32 (a weight's rows are cut into jobs of
  /// about this size; FP8-block outputs round up to 128 rows). Bounds memory, never changes
  /// the output (not a parameter).
  std::uint64_t job_bytes = std::uint64_t{8} << 20;
  ProgressMode progress = ProgressMode::kAuto;  ///< the terminal progress line (not a parameter)
};

/// Consecutive indices [first, first + count) into ConvertPlan::outputs: an entry's outputs,
/// and a source's, are made together (8 bytes instead of a vector).
struct OutputRun {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  std::size_t size() const { return count; }
  bool empty() const { return count == 0; }
  std::size_t operator[](std::size_t k) const { return std::size_t{first} + k; }
  /// Adds index i; false (unchanged) when i does not follow the run.
  bool extend(std::size_t i);

  struct Iterator {
    std::size_t i;
    std::size_t operator*() const { return i; }
    Iterator& operator++() {
      ++i;
      return *this;
    }
    bool operator==(const Iterator&) const = default;
  };
  Iterator begin() const { return {first}; }
  Iterator end() const { return {std::size_t{first} + count}; }
};

/// One output weight or kept tensor (80 bytes: the members are ordered to pack).
struct PlanEntry {
  const LogicalWeight* weight = nullptr;  ///< null for a raw tensor kept by --keep-unknown
  TensorRef raw;                          ///< the raw tensor (set when weight is null)
  /// The output name: a view of the weight's name, or of the checkpoint's for a raw tensor.
  std::string_view name;
  std::string_view rule;  ///< a static rule name (rules.cc, or one of the plan's own)
  std::uint64_t group = 0;
  OutputRun outputs;
  int bits = 0;  ///< integer encodings: the bit width (int4 with 2 has qmax 1)
  Disposition disposition;
  WeightClass cls;
  Encoding encoding;
  bool stamped = false;  ///< kFp8Container: named in its shard's __metadata__["colibri.fmt"]
};

/// The manifest's encoding word for an entry ("int4-group", "int4-group-2bit", "raw", ...).
std::string entry_encoding_name(const PlanEntry& e);

/// What happened to one raw source tensor.
enum class SourceDisposition : std::uint8_t { kUnset, kConvert, kKeep, kConsume, kDrop, kUnfuse };

/// "convert", "keep", "consume", "drop", "unfuse" (the manifest's words).
const char* source_disposition_name(SourceDisposition d);

/// What happened to one raw source tensor (for the manifest); its name is the checkpoint's at
/// the same position.
struct SourceRecord {
  std::string_view consumed_by;  ///< kConsume: the name of the weight using it (its base)
  OutputRun outputs;
  std::uint16_t rule = 0;  ///< its rule: an index into ConvertPlan::rule_names
  SourceDisposition disposition = SourceDisposition::kUnset;
  bool recorded = false;  ///< the plan named it (every tensor ends up so)
};

struct ConvertPlan {
  std::optional<MoeConfig> config;
  /// The family whose rules and coverage list were applied; null when converting by name
  /// rules alone (no config.json, --no-coverage-gate).
  const Family* family = nullptr;
  bool coverage_checked = false;
  /// Index metadata that no loader uses and that disagrees with the tensors (total_size).
  std::vector<std::string> warnings;
  Recognized recognized;
  std::vector<PlanEntry> entries;  ///< in output order
  /// Every output tensor, in write order: names and shapes view the checkpoint, the weights or
  /// recognized.names (the plan must not outlive the checkpoint).
  std::vector<TensorView> outputs;
  /// One record per checkpoint tensor, at its position in Checkpoint::tensors() (walk them
  /// in name order with Checkpoint::by_name()); every tensor is named by the plan.
  std::vector<SourceRecord> sources;
  /// The rules sources name, each once (static rule names: rules.cc, or the plan's own); 0 is
  /// none. A record holds an index, not a view (16 bytes less per source tensor).
  std::vector<std::string_view> rule_names{std::string_view()};
  std::string_view rule_of(const SourceRecord& s) const { return rule_names[s.rule]; }
  std::map<std::string, std::size_t> class_counts;  ///< outputs per "class encoding"
  std::size_t stamped = 0;  ///< entries stamped fp8-e4m3-b128 (fp8-passthrough residents)
};

/// The classes --bits names, in the order parameters list them.
std::span<const WeightClass> bit_classes();
/// "gate", "up", "down".
const char* expert_projection_name(ExpertProjection p);

/// The bits a class gets under `o`: its override, else the scheme's default (int4-* 4,
/// int2-row 2, int3-g64 3, io 8 under those; int8-row 8).
int class_bits(const ConvertOptions& o, WeightClass c);
/// The bits a routed expert projection gets: its override, else class_bits(experts).
int projection_bits(const ConvertOptions& o, ExpertProjection p);
/// Every --bits name (classes, then gate/up/down) with the width `o` resolves it to; empty for
/// schemes without bit widths. What a run records and its PLAN line prints.
std::vector<std::pair<std::string_view, int>> resolved_bit_widths(const ConvertOptions& o);

/// The bits weight `name` of class `c` gets (per projection for routed experts).
int weight_bits(const ConvertOptions& o, WeightClass c, std::string_view name);

/// Parses "--bits experts=4,shared=8,attn=8,o_proj=8,kv_b=8,dense=8,io=16,gate=4,up=4,down=8"
/// (classes of bit_classes() and the routed projections gate/up/down). Errors on unknown
/// names, values other than 2/3/4/8/16, repeats, or any --bits with a scheme that has no bit
/// widths.
Result<BitWidths> parse_bits(const std::string& text, const Scheme& scheme);

/// One line for users: the family and model_type, whether coverage was checked, the name map,
/// and the source encodings with their counts.
std::string plan_family_line(const ConvertPlan& plan);

/// Builds and validates the plan. Reads config.json and the (small) FP8 scale tensors, never
/// weight data.
Result<ConvertPlan> plan_conversion(const Checkpoint& ck, const ConvertOptions& o);

}  // namespace qrepack
