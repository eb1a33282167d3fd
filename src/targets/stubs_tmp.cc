#include "targets/planners.h"
#include "qrepack/targets/check_load.h"
namespace qrepack {
}
namespace qrepack {
Result<TargetLoadReport> check_load_target(const std::string&, const Target&) { return TargetLoadReport{}; }
}
