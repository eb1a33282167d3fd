// colibri-glm53: placeholder until the planner lands.
#include "targets/check_load_parts.h"
#include "targets/planners.h"

namespace qrepack {

Result<ContainerPlan> plan_glm53(const Checkpoint&, const ContainerOptions&) {
  return Error(ErrorKind::kUsage, "--target colibri-glm53 is not built yet");
}
Status check_glm53(Loader&, const Json&) {
  return Error(ErrorKind::kInternal, "colibri-glm53 has no container check yet");
}

}  // namespace qrepack
