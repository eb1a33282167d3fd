// The data path of `convert`: every plan entry is cut into jobs (row blocks of a weight, byte
// ranges of a raw tensor) that the thread pool reads and encodes independently, each into its
// own slot of reused buffers, while the calling thread appends the finished jobs to the output
// in plan order (ordered_pipeline). Memory is a fixed number of slots whatever the checkpoint
// size; output bytes do not depend on the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "exec/hashing_output.h"
#include "qrepack/core/error.h"
#include "qrepack/core/progress.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

/// Converts every entry of `plan` into `out`. Entries whose outputs all belong to shards the
/// writer reuses are skipped with their `previous_hashes`. Jobs hold about `job_bytes` of
/// decoded f32. Adds the source bytes read to `bytes_read` and reports progress per job.
Status stream_entries(const Checkpoint& ck, const ConvertPlan& plan, const CheckpointWriter& writer,
                      HashingOutput& out,
                      const std::unordered_map<std::string, std::uint64_t>& previous_hashes,
                      std::uint64_t job_bytes, ProgressLine& progress, std::uint64_t& bytes_read);

/// Source bytes of every entry (the progress total).
std::uint64_t source_bytes(const ConvertPlan& plan);

}  // namespace qrepack
