// check-load: re-reads a converted checkpoint as the C engine would. Expected names and [O, I]
// come from its config.json (glm_moe_weights); a weight with "<name>.qs" must match an engine
// format by byte counts (container_format.h); one without must be a float tensor of the
// config's shape. The MTP head and the DSA indexer (the --mtp and --indexer passes) are
// checked, all of their tensors, when any of them is present. Reports every missing or
// unloadable tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

struct CheckLoadReport {
  std::size_t checked = 0;
  std::map<std::string, std::size_t> formats;  ///< tensors per detected format
  std::vector<std::string> passes;             ///< "mtp", "indexer": extra passes checked
  std::vector<std::string> missing;
  std::vector<std::string> unloadable;  ///< name: reason
  bool ok() const { return missing.empty() && unloadable.empty(); }
};

/// Without `include_main`, only the passes present (a directory holding a --mtp or --indexer
/// pass alone).
Result<CheckLoadReport> check_load(const std::string& dir, bool include_main = true);

}  // namespace qrepack
