// The one executor under every conversion: output files whose every byte's offset is known
// from the plan, filled by jobs that run on every worker in any order and land with pwrite.
// A job source (the container targets' units, the GLM-style entries) lists the jobs of the
// files to write, in file order, and runs one job at a time on a worker. A file is created (a
// sibling temp file at its final size, its header written) when the first job touching it
// starts and renamed into place when the last one ends; at most kMaxOpenOutputs are open at
// once, and the output does not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/safetensors_writer.h"

namespace qrepack {

/// Output files open at once, whatever the plan's file count and the thread count.
inline constexpr std::size_t kMaxOpenOutputs = 64;

/// One planned output file: its name in the output directory and its layout: a safetensors
/// file (its header written when the file is created, jobs' offsets counted from its data), or,
/// without a layout, a raw file of `raw_size` bytes that reads as zeros where no job writes
/// (exec/byte_files.h: literal headers and copied ranges at offsets the plan fixes).
struct OutputFile {
  std::string_view name;
  const SafetensorsLayout* layout = nullptr;
  std::uint64_t raw_size = 0;
  std::uint64_t header_size() const { return layout ? layout->header_size : 0; }
  std::uint64_t file_size() const { return layout ? layout->file_size() : raw_size; }
};

/// One job: `unit`, `part`, `first` and `count` mean what the source says (a unit's piece and
/// its rows, an entry's rows, a tensor's bytes); `file` is where it is listed and `file2` a
/// second file it writes (an entry whose scales land in the next file).
struct FileJob {
  static constexpr std::uint32_t kNone = ~std::uint32_t{0};
  std::uint32_t file = 0;
  std::uint32_t file2 = kNone;
  std::uint32_t unit = 0;
  std::uint32_t part = 0;
  std::uint64_t first = 0, count = 0;
  bool create_only = false;  ///< the executor's own: creates a file no job writes
};

/// Positioned writes into the files being written.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  /// Writes `bytes` at `offset` of the data section (after the header) of `file`.
  virtual Status write(std::uint32_t file, std::uint64_t offset,
                       std::span<const std::uint8_t> bytes) = 0;
};

class FileJobSource {
 public:
  virtual ~FileJobSource() = default;
  /// Every job of the files whose `write` flag is set, in file order (jobs listed under a file
  /// may also write the next one). Each byte of a written file is written by exactly one job.
  virtual Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) = 0;
  /// Runs one job on worker `worker` (< the thread count), writing through `out`; returns the
  /// source bytes it read.
  virtual Result<std::uint64_t> run(const FileJob& job, std::size_t worker, FileWriter& out) = 0;
};

struct FileJobsConfig {
  /// Called after each job with the source bytes read so far (serialized; for progress).
  std::function<void(std::uint64_t)> on_progress;
  /// Test hooks: the process kills itself (SIGKILL) once this many jobs are done, or once
  /// this many files are done and recorded (0: never); QREPACK_FAULT_KILL_AFTER_JOBS / _FILES.
  std::uint64_t kill_after_jobs = 0;
  std::uint64_t kill_after_files = 0;
};

/// The test hooks from the environment.
FileJobsConfig fault_hooks_from_env();

/// Writes the files of `files` whose `write` flag is set into `dir`. `on_done(i)` runs after
/// file i is durable at its final name, on the worker that finished it, one call at a time; an
/// error from it stops the run. A failed run removes its temp files. Returns the source bytes
/// read.
Result<std::uint64_t> run_file_jobs(std::span<const OutputFile> files,
                                    const std::vector<bool>& write, const std::string& dir,
                                    FileJobSource& source, const FileJobsConfig& config,
                                    const std::function<Status(std::size_t)>& on_done);

/// The xxhash64 of each (offset, size) range of the file at `path` (a finished output, read
/// through a mapping of its cached pages).
Result<std::vector<std::uint64_t>> xxhash64_of_ranges(
    const std::string& path, std::span<const std::pair<std::uint64_t, std::uint64_t>> ranges);

}  // namespace qrepack
