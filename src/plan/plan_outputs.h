// What both sides of a GLM-style plan add to it (the family side in convert_plan.cc, the
// target side in glm_layout.cc): output tensors, consecutive per entry, whose names and shapes
// live in the plan's arena, and the problems found on the way.
#pragma once

#include <initializer_list>
#include <span>
#include <string_view>

#include "core/problems.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

class PlanOutputs {
 public:
  PlanOutputs(ConvertPlan& plan, Problems& problems) : plan_(plan), problems_(problems) {}
  ConvertPlan& plan() { return plan_; }
  Problems& problems() { return problems_; }

  /// A source name under the family's name map: the checkpoint's view when the map leaves it,
  /// else a copy in the plan's arena.
  std::string_view mapped_name(std::string_view source);
  /// `name` + `suffix`, in the plan's arena.
  std::string_view suffixed(std::string_view name, std::string_view suffix);
  /// A shape, in the plan's arena.
  std::span<const std::uint64_t> dims(std::initializer_list<std::uint64_t> d);
  /// Appends an output of entry `e` (an internal problem when its outputs would not be
  /// consecutive, or over 2^32).
  void add_output(PlanEntry& e, TensorView spec);

 private:
  ConvertPlan& plan_;
  Problems& problems_;
};

}  // namespace qrepack
