// The CLI side of the families the engine runs as downloaded (targets/release_check.h):
// check-load of a vendor directory, convert's one-line refusal, inspect's family line.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack::cli {

/// When `model_type` belongs to a family the engine runs as downloaded and no target converts
/// it, the refusal convert answers with (usage error, rule release.no_conversion); else ok.
/// Model types a target converts (Qwen3.8's optional int4 overlay) keep their routing.
Status refuse_release_convert(std::string_view model_type);

/// check-load of a directory with no qrepack.json naming a target: when its config.json's
/// model_type is a release family, checks it as that runtime loads it and returns true in
/// `handled`; else leaves `handled` false.
Status release_check_load(const std::string& dir, bool& handled);

/// inspect's model line for a release family ("<title> (model_type X): no conversion needed:
/// <runtime> runs these files as downloaded"), or nullopt.
std::optional<std::string> release_model_line(std::string_view model_type);

}  // namespace qrepack::cli
