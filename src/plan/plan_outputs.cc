#include "plan/plan_outputs.h"

#include <fmt/format.h>

#include <limits>

namespace qrepack {

std::string_view PlanOutputs::mapped_name(std::string_view source) {
  const std::string out = *map_source_name(plan_.recognized.name_map, source);
  return out == source ? source : plan_.recognized.names->copy(out);
}

std::string_view PlanOutputs::suffixed(std::string_view name, std::string_view suffix) {
  return plan_.recognized.names->copy_joined(name, suffix);
}

std::span<const std::uint64_t> PlanOutputs::dims(std::initializer_list<std::uint64_t> d) {
  return plan_.recognized.names->copy(std::span<const std::uint64_t>(d.begin(), d.size()));
}

void PlanOutputs::add_output(PlanEntry& e, TensorView spec) {
  if (plan_.outputs.size() >= std::numeric_limits<std::uint32_t>::max() ||
      !e.outputs.extend(plan_.outputs.size())) {
    problems_.add(ErrorKind::kInternal,
                  fmt::format("tensor '{}': outputs out of order or over 2^32", spec.name));
    return;
  }
  plan_.outputs.push_back(std::move(spec));
}

}  // namespace qrepack
