// check-load for the container targets: mirrors what each runtime's loader checks when it
// opens the directory (read from its source: c/qwen36.c, c/qwen3.c, c/olmoe.c, c/llama.c),
// so a container that passes loads there.
#pragma once

#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/targets/target.h"

namespace qrepack {

struct TargetLoadReport {
  std::size_t checked = 0;              ///< tensors the loader reads, found and well-formed
  std::vector<std::string> missing;     ///< tensors the loader needs that are absent
  std::vector<std::string> unloadable;  ///< present, but the loader would refuse them (why)
  bool ok() const { return missing.empty() && unloadable.empty(); }
};

/// Checks `dir` as target `t`'s runtime loads it. Errors only when the directory cannot be
/// read (no config.json, a damaged safetensors header).
Result<TargetLoadReport> check_load_target(const std::string& dir, const Target& t);

/// The target qrepack.json in `dir` names, or nullptr when it names none (an older run, or a
/// directory qrepack did not write). Without qrepack.json, a manifest.json declaring g4lab's
/// expert-pack format names colibri-gemma4.
Result<const Target*> recorded_target(const std::string& dir);

}  // namespace qrepack
