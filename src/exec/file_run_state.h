// The state of a resumable run or of one --shard worker, for outputs written file by file
// (the container targets, GGUF -> colibri-olmoe): which files an earlier run finished (reused
// when their bytes still hash to the record), the state file rewritten as files finish, and
// the checks a resumed run makes before touching anything.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/file_jobs.h"
#include "qrepack/core/error.h"
#include "qrepack/exec/container_exec.h"
#include "qrepack/exec/convert.h"
#include "qrepack/io/safetensors_writer.h"

namespace qrepack {

class FileRunState {
 public:
  /// `files`: the planned output files in order; `stamp`: source_stamp of the source's files.
  FileRunState(std::vector<std::string> files, std::string out_dir, const ShardTask* shard,
               std::string source, nlohmann::json stamp);

  /// Reads an earlier run's state file when there is one (refusing other parameters, another
  /// plan or changed source files), clears `write` for every recorded file whose bytes still
  /// match (counted in `reused`), and writes this run's state before any output.
  Status start(const nlohmann::json& parameters, const std::string& fingerprint,
               std::vector<bool>& write, std::size_t& reused);
  /// File i is at its final name: recorded now, or once the remote files it may have been
  /// read from are checked whole (flush).
  Status done(std::size_t i);
  Status flush();
  /// The run is complete: the manifest replaces the state file.
  void remove();

 private:
  Status reuse(const nlohmann::json& parameters, const std::string& fingerprint,
               std::vector<bool>& write, std::size_t& reused);
  std::vector<std::string> files_;
  std::string dir_;
  const ShardTask* shard_;
  std::string path_;
  std::string source_;
  nlohmann::json stamp_;
  nlohmann::ordered_json state_;
  std::vector<std::pair<std::string, std::string>> pending_;
};

/// One run of files the executor writes: the files this run writes and the state that records
/// them (none for a plain run).
struct FileRun {
  std::vector<bool> write;
  std::optional<FileRunState> state;
  bool complete = false;   ///< --resume found this run finished in OUT: nothing to do
  std::size_t reused = 0;  ///< files an earlier run finished, kept
};

/// Starts a run of the files `names` (their `layouts` in the same order) into `out_dir`: all of
/// them for a plain run; a worker's share for --shard; for --resume, those an earlier run did not
/// finish (its state checked against `parameters`, `fingerprint()` and the source's `stamp`).
Result<FileRun> start_file_run(std::vector<std::string> names,
                               std::span<const SafetensorsLayout> layouts,
                               const std::string& out_dir, const ContainerRun& run,
                               std::string source, nlohmann::json stamp,
                               const nlohmann::json& parameters,
                               const std::function<std::string()>& fingerprint);
/// The same for files given by their sizes (raw files: exec/byte_files.h).
Result<FileRun> start_file_run(std::vector<std::string> names, std::span<const std::uint64_t> sizes,
                               const std::string& out_dir, const ContainerRun& run,
                               std::string source, nlohmann::json stamp,
                               const nlohmann::json& parameters,
                               const std::function<std::string()>& fingerprint);

/// Runs `jobs` over the files `run` writes, recording each finished file in its state;
/// `on_progress` (optional) gets the source bytes read so far after each job.
Result<std::uint64_t> run_files(std::span<const OutputFile> files, FileRun& run,
                                const std::string& out_dir, FileJobSource& jobs,
                                std::function<void(std::uint64_t)> on_progress = {});

/// The safetensors files `names` with their `layouts` (same order) as the executor takes them;
/// the views point into both.
std::vector<OutputFile> output_files(std::span<const std::string> names,
                                     std::span<const SafetensorsLayout> layouts);

/// The middle every file-by-file writer shares, after start_file_run: nothing when an earlier
/// run finished them all (rep.already_complete), else `jobs` over the files `run` writes (`files`
/// in plan order; `on_progress` as for run_files), then the state recorded once every remote
/// file read is checked whole (only the data read, for a --shard worker). Fills rep's
/// reused_files, files_written and bytes_read; the caller writes its finishing files, then
/// removes the state.
Status run_started_files(FileRun& run, std::span<const OutputFile> files,
                         const std::string& out_dir, bool shard, FileJobSource& jobs,
                         ContainerReport& rep, std::function<void(std::uint64_t)> on_progress = {});

/// A --resume run into `out_dir` that holds no state file: true when it holds this run already
/// finished (its manifest, with `parameters`); false to start afresh. Refused (rule
/// resume.progress) when it holds a run made with other parameters, or tensor files (or any of
/// `planned`) no state file records.
Result<bool> resume_finished(const std::string& out_dir, const nlohmann::json& parameters,
                             std::span<const std::string> planned = {});

/// An earlier run's state `prev` (read from `path`) against this run: the same parameters
/// (resume.same_parameters), plan (resume.same_plan) and source files (resume.same_source).
Status check_same_run(const nlohmann::json& prev, const nlohmann::json& parameters,
                      const std::string& fingerprint, const nlohmann::json& stamp,
                      const std::string& path);

/// The files worker `task` writes: assign_output_shards over the files' sizes.
std::vector<bool> files_of_worker(std::span<const SafetensorsLayout> layouts,
                                  const ShardTask& task);

}  // namespace qrepack
