// The target side of a GLM-style plan (targets colibri-glm and generic; docs/targets.md): the
// encoding a weight's class gets under the scheme and --bits, the output tensors each encoding
// makes under the GLM runtime's names (U8 data + F32 .qs, 1-D), the fp8-e4m3-b128 stamp, and
// the refusal of shapes whose byte counts the runtime would read back as another format. It
// knows no family's rule table: the family side (convert_plan.cc) hands it classified weights.
#pragma once

#include "plan/plan_outputs.h"
#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

class GlmLayout {
 public:
  GlmLayout(const ConvertOptions& o, PlanOutputs& out) : o_(o), out_(out) {}

  /// fp8-passthrough keeps float embeddings and heads as stored.
  bool keeps_io_as_stored(const PlanEntry& e, const LogicalWeight& w) const;
  /// Step 2: the encoding (and bits, group, stamp) of a quantized entry.
  void choose_encoding(PlanEntry& e, const LogicalWeight& w) const;
  /// Step 3: the entry's output tensors, named by the runtime's conventions.
  void add_encoded_outputs(PlanEntry& e, const LogicalWeight& w);
  /// False, with a problem added, when the runtime would read the outputs back as another
  /// format (container.collision).
  bool reads_back_as_written(const PlanEntry& e, const LogicalWeight& w);

 private:
  static bool stamps(WeightClass c);
  bool e8_applies(const PlanEntry& e, const LogicalWeight& w);
  const ConvertOptions& o_;
  PlanOutputs& out_;
};

}  // namespace qrepack
