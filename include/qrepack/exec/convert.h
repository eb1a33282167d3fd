// execute + commit for `convert`: cuts every planned entry into jobs of about --job-size bytes
// of f32 (convert_stream), encodes them on the pool into a fixed set of reused slots and
// appends them in plan order (peak memory ~ slots x job size plus one weight's scales per
// thread, independent of model size), and writes shards, side files and the qrepack.json
// manifest atomically.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

struct ConvertReport {
  std::size_t outputs = 0;
  std::size_t shards = 0;
  std::uint64_t bytes_read = 0;     ///< source tensor bytes read
  std::uint64_t bytes_written = 0;  ///< output tensor bytes
  double seconds = 0;
  std::size_t reused_shards = 0;   ///< --resume: shards kept from the earlier run
  std::size_t shards_written = 0;  ///< shards this run wrote (a --shard worker: its part)
  bool already_complete = false;   ///< --resume found the finished output: nothing was done
};

/// One worker of a multi-machine run (`convert --shard I/N`): it writes the output shards
/// assign_output_shards gives index I, publishing each as it completes and recording it in
/// OUT/.qrepack-part-I-of-N.json; `qrepack merge` then checks the parts and completes the
/// directory.
struct ShardTask {
  std::size_t index = 0, count = 1;
};

/// Output shards of worker `index` of `count`: contiguous runs of shards balanced by bytes
/// (shard s goes to the worker whose share of the total holds the middle of s's bytes).
std::vector<bool> assign_output_shards(const std::vector<std::uint64_t>& shard_bytes,
                                       const ShardTask& task);

std::string part_file_name(const ShardTask& task);

/// Writes `plan` into `out_dir` (an existing directory). The run's parameters (scheme, resolved
/// bits, name rules, keep flags, coverage gate, shard size, pass) are recorded in the manifest.
/// With `resume`, shards are published as they complete and recorded with their checksums in
/// OUT/.qrepack-progress.json; a rerun with `resume` reuses every recorded shard whose file
/// still has its checksum, and refuses (kParameterMismatch) an earlier run made with other
/// parameters or another source layout.
Result<ConvertReport> execute_conversion(const Checkpoint& ck, const ConvertPlan& plan,
                                         const ConvertOptions& o, const std::string& out_dir,
                                         bool resume, const ShardTask* shard = nullptr);

/// The shard name prefix of a pass's files: "out-mtp-" (--mtp), "out-idx-" (--indexer).
std::string_view pass_file_prefix(ConvertPass p);

inline constexpr const char* kProgressFileName = ".qrepack-progress.json";

}  // namespace qrepack
