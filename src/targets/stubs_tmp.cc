#include "targets/planners.h"
#include "qrepack/targets/check_load.h"
namespace qrepack {
Result<ContainerPlan> plan_qwen36(const Checkpoint&, const ContainerOptions&) { return Error(ErrorKind::kInternal, "todo"); }
}
namespace qrepack {
Result<TargetLoadReport> check_load_target(const std::string&, const Target&) { return TargetLoadReport{}; }
}
