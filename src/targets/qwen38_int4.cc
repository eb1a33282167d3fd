// colibri-qwen38-int4: placeholder until the planner lands.
#include "targets/check_load_parts.h"
#include "targets/planners.h"

namespace qrepack {

Result<ContainerPlan> plan_qwen38_int4(const Checkpoint&, const ContainerOptions&) {
  return Error(ErrorKind::kUsage, "--target colibri-qwen38-int4 is not built yet");
}
Status check_qwen38_int4(Loader&, const Json&) {
  return Error(ErrorKind::kInternal, "colibri-qwen38-int4 has no container check yet");
}

}  // namespace qrepack
