// The executor of a ContainerPlan (qrepack/targets/container.h): every output byte's offset is
// known from the plan, so jobs (row blocks of a unit, byte ranges of a copy) run on every
// thread in any order and land with pwrite; output does not depend on the thread count.
// Files are written in plan order by the one executor (exec/file_jobs.h), each as a sibling
// temp file renamed into place when its last job is done, with at most 64 open at once.
//
// A run is one of three kinds:
// - plain: into a staged directory the caller publishes;
// - resumable (`--resume`): straight into OUT, each finished file recorded with its xxhash64
//   in OUT/.qrepack-progress.json; a rerun reuses every recorded file whose bytes still hash
//   to it, and refuses a run made with other parameters or another source or plan;
// - one worker of `--shard I/N`: the files assign_output_shards gives it, recorded in
//   OUT/.qrepack-part-I-of-N.json; `qrepack merge` checks the parts and completes the run
//   as a resumable one that reuses every file.
// Every kind produces the same bytes.
#pragma once

#include <cstdint>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/exec/convert.h"
#include "qrepack/targets/container.h"

namespace qrepack {

struct ContainerRun {
  bool resume = false;
  const ShardTask* shard = nullptr;  ///< one worker of --shard I/N (resumes by itself)
};

struct ContainerReport {
  std::size_t tensors = 0;
  std::size_t files = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;  ///< every planned file's size (reused ones included)
  double seconds = 0;
  std::size_t hard_linked = 0;   ///< colibri-llama: shards staged by hard link
  std::size_t reused_files = 0;  ///< --resume: files kept from the earlier run
  std::size_t files_written = 0;
  bool already_complete = false;  ///< --resume found the finished output: nothing was done
};

/// Writes `plan` into `out_dir` (plain: the existing, empty staged directory; resumable or a
/// worker: OUT itself): tensor files, then (not for a worker) staged shards, side files and
/// qrepack.json.
Result<ContainerReport> write_container(const Checkpoint& ck, const ContainerPlan& plan,
                                        const ContainerOptions& o, const std::string& out_dir,
                                        const ContainerRun& run = {});

}  // namespace qrepack
