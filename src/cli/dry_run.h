// convert --dry-run: what a conversion would write and the disk it needs, printed before a
// byte of tensor data is read or anything is created (for a remote source: before the
// download that would take hours).
#pragma once

#include <cstdint>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/plan/convert_plan.h"
#include "qrepack/targets/container.h"

namespace qrepack::cli {

/// The GLM-style plan's output: shards as --max-shard-size cuts them.
Status print_dry_run(const Checkpoint& ck, const ConvertPlan& plan, std::uint64_t max_shard_bytes,
                     const std::string& out);
/// A container target's output.
Status print_dry_run(const Checkpoint& ck, const ContainerPlan& plan, const std::string& out);

}  // namespace qrepack::cli
