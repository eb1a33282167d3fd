// Running byte files (targets/container/byte_layout.h) on the one executor
// (exec/file_jobs.h): each ByteJob one job, literals written as they are, copies read from the
// sources; and a whole run, with the state files of --resume and --shard, the side files and
// qrepack.json, as write_container does for safetensors containers.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "exec/file_jobs.h"
#include "qrepack/core/error.h"
#include "qrepack/core/progress.h"
#include "qrepack/exec/container_exec.h"
#include "qrepack/io/byte_source.h"
#include "targets/container/byte_layout.h"

namespace qrepack {

/// Bytes one copy reads at a time (a longer piece is copied in chunks of this).
inline constexpr std::uint64_t kByteCopyChunk = std::uint64_t{8} << 20;

/// The executor's jobs for `files` (one per ByteJob): literals written as they are, copies read
/// from `sources` in chunks of kByteCopyChunk into one reused buffer per worker.
std::unique_ptr<FileJobSource> byte_file_jobs(std::span<const ByteFile> files,
                                              std::span<const ByteSource* const> sources);

/// Where a byte run reads from.
struct ByteRunSources {
  std::span<const ByteSource* const> sources;  ///< the pieces' source indices
  std::string path;                            ///< recorded by a --shard worker for merge
  nlohmann::json stamp;                        ///< source_stamp of the source files
};

/// Writes `plan` into `out_dir` as write_container does (plain: the empty staged directory the
/// caller publishes; --resume or a --shard worker: OUT itself): the byte files on the executor,
/// then (not a worker) the side files and qrepack.json.
Result<ContainerReport> write_byte_files(const ByteRunPlan& plan, const ByteRunSources& from,
                                         const std::string& out_dir, const ContainerRun& run,
                                         ProgressMode progress = ProgressMode::kAuto);

}  // namespace qrepack
