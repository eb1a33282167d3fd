// The GLM-style conversion's side of the executor (exec/file_jobs.h): every plan entry cut
// into jobs (row blocks of a weight, byte ranges of a raw tensor) that any worker reads and
// encodes, writing the rows' codes and scales at their outputs' offsets in the shard plan's
// files. Memory is one job's buffers per worker whatever the checkpoint size; output bytes do
// not depend on the thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/file_jobs.h"
#include "exec/hashing_output.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

/// Writes every output of `plan` that lies in a shard whose `write` flag is set into `dir`
/// (shards planned by plan_output_shards, each renamed into place when done). After shard s is
/// final, its tensors' xxhash64 are read back into `hashes` and `on_done(s, file xxhash64)`
/// runs (one call at a time). Jobs hold about `job_bytes` of decoded f32. Returns the source
/// bytes read; `progress` (may be null) sees the running count.
Result<std::uint64_t> write_shards(
    const Checkpoint& ck, const ConvertPlan& plan, const ShardPlan& shards,
    const std::vector<bool>& write, const std::string& dir, std::uint64_t job_bytes,
    OutputHashes& hashes, ProgressLine* progress,
    const std::function<Status(std::size_t, std::uint64_t)>& on_done);

/// Source bytes of every entry (the progress total).
std::uint64_t source_bytes(const ConvertPlan& plan);

}  // namespace qrepack
