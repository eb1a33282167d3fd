// colibri-inkling and colibri-inkling-dense: placeholders until the planners land.
#include "targets/check_load_parts.h"
#include "targets/planners.h"

namespace qrepack {

Result<ContainerPlan> plan_inkling(const Checkpoint&, const ContainerOptions&) {
  return Error(ErrorKind::kUsage, "--target colibri-inkling is not built yet");
}
Result<ContainerPlan> plan_inkling_dense(const Checkpoint&, const ContainerOptions&) {
  return Error(ErrorKind::kUsage, "--target colibri-inkling-dense is not built yet");
}
Status check_inkling(Loader&, const Json&) {
  return Error(ErrorKind::kInternal, "colibri-inkling has no container check yet");
}
Status check_inkling_dense(Loader&, const Json&) {
  return Error(ErrorKind::kInternal, "colibri-inkling-dense has no container check yet");
}

}  // namespace qrepack
