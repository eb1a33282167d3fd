// FileRunState (exec/file_run_state.h).
#include "exec/file_run_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/io/output_txn.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

Result<std::string> file_hash(const std::string& path) {
  QR_ASSIGN_OR_RETURN(src, FileSource::open(path));
  QR_ASSIGN_OR_RETURN(h, xxhash64_of(*src));
  return fmt::format("{:016x}", h);
}

// True when `out_dir` holds a finished run (its manifest, no progress file) made with
// `parameters`; an error when it was made with others.
Result<bool> finished_with(const std::string& out_dir, const nlohmann::json& parameters) {
  const std::string manifest = (fs::path(out_dir) / "qrepack.json").string();
  if (path_kind(manifest) == PathKind::kMissing) return false;
  QR_ASSIGN_OR_RETURN(m,
                      read_json_file(manifest, ErrorKind::kParameterMismatch, kMaxManifestBytes));
  if (!m.is_object() || !m.contains("parameters") || m["parameters"] != parameters) {
    return Error(ErrorKind::kOutputExists,
                 "output directory holds a finished conversion made with other parameters")
        .in_file(out_dir)
        .with_rule("resume.progress");
  }
  return true;
}

// A resumable run without a state file: nothing to resume may hold tensor files already, nor
// any file the plan writes (`planned`: raw files have names of their own).
Status refuse_unrecorded_files(const std::string& out_dir, std::span<const std::string> planned) {
  QR_ASSIGN_OR_RETURN(names, list_directory(out_dir));
  for (const std::string& n : names) {
    const bool is_planned = std::find(planned.begin(), planned.end(), n) != planned.end();
    if ((n.ends_with(".safetensors") && n[0] != '.') || is_planned) {
      return Error(ErrorKind::kOutputExists,
                   fmt::format("output directory holds {} but no {} to resume from", n,
                               kProgressFileName))
          .in_file(out_dir)
          .with_rule("resume.progress");
    }
  }
  return ok_status();
}

// The files a finished run's manifest lists (tensor files, staged shards, side files).
Result<std::vector<std::string>> manifest_files(const std::string& out_dir) {
  const std::string manifest = (fs::path(out_dir) / "qrepack.json").string();
  QR_ASSIGN_OR_RETURN(m,
                      read_json_file(manifest, ErrorKind::kParameterMismatch, kMaxManifestBytes));
  std::vector<std::string> out;
  if (!m.contains("files") || !m["files"].is_array()) return out;
  for (const auto& f : m["files"]) {
    if (f.is_object() && f.contains("name") && f["name"].is_string()) {
      out.push_back(f["name"].get<std::string>());
    }
  }
  return out;
}

// Which planned files a finished run left in place at their planned size; `intact` is false
// when one is not, or when a file the manifest lists is gone (an index or side file deleted).
struct FinishedFiles {
  std::vector<bool> kept;
  bool intact = true;
};

Result<FinishedFiles> finished_files(const std::string& out_dir,
                                     const std::vector<std::string>& names,
                                     std::span<const std::uint64_t> sizes) {
  FinishedFiles f;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::error_code ec;
    const auto size = fs::file_size(fs::path(out_dir) / names[i], ec);
    f.kept.push_back(!ec && size == sizes[i]);
    f.intact = f.intact && f.kept.back();
  }
  QR_ASSIGN_OR_RETURN(listed, manifest_files(out_dir));
  for (const std::string& n : listed) {
    if (path_kind((fs::path(out_dir) / n).string()) == PathKind::kMissing) f.intact = false;
  }
  return f;
}

}  // namespace

FileRunState::FileRunState(std::vector<std::string> files, std::string out_dir,
                           const ShardTask* shard, std::string source, nlohmann::json stamp)
    : files_(std::move(files)),
      dir_(std::move(out_dir)),
      shard_(shard),
      source_(std::move(source)),
      stamp_(std::move(stamp)) {
  path_ =
      (fs::path(dir_) / (shard ? part_file_name(*shard) : std::string(kProgressFileName))).string();
}

Status FileRunState::start(const nlohmann::json& parameters, const std::string& fingerprint,
                           std::vector<bool>& write, std::size_t& reused) {
  state_ = {{"parameters", parameters},
            {"fingerprint", fingerprint},
            {"source_stamp", stamp_},
            {"shards", nlohmann::json::object()}};
  if (shard_) {
    state_["part"] = {{"index", shard_->index}, {"count", shard_->count}};
    state_["source"] = source_;
    nlohmann::json names = nlohmann::json::array();
    for (const std::string& f : files_) names.push_back(f);
    state_["plan_shards"] = std::move(names);
    for (std::size_t i = 0; i < write.size(); ++i) {
      if (write[i]) remove_stale_temps(dir_, files_[i]);  // a dead run's
    }
  }
  if (path_kind(path_) != PathKind::kMissing) QR_TRY(reuse(parameters, fingerprint, write, reused));
  return write_json_file(path_, state_);
}

Status FileRunState::done(std::size_t i) {
  const std::string& name = files_[i];
  QR_ASSIGN_OR_RETURN(h, file_hash((fs::path(dir_) / name).string()));
  pending_.emplace_back(name, h);
  return remote::read_files_verified() ? flush() : ok_status();
}

Status FileRunState::flush() {
  if (pending_.empty()) return ok_status();
  for (auto& [name, h] : pending_) {
    state_["shards"][name] = {{"xxhash64", h}, {"tensors", nlohmann::json::object()}};
  }
  pending_.clear();
  return write_json_file(path_, state_);
}

void FileRunState::remove() {
  std::error_code ec;
  fs::remove(path_, ec);
}

Status FileRunState::reuse(const nlohmann::json& parameters, const std::string& fingerprint,
                           std::vector<bool>& write, std::size_t& reused) {
  QR_ASSIGN_OR_RETURN(
      prev, read_run_state(path_, shard_ ? RunStateKind::kPart : RunStateKind::kProgress));
  QR_TRY(check_same_run(prev, parameters, fingerprint, stamp_, path_));
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const std::string& name = files_[i];
    if (!prev["shards"].contains(name)) continue;
    const auto& rec = prev["shards"][name];
    const std::string path = (fs::path(dir_) / name).string();
    if (path_kind(path) != PathKind::kRegular) continue;  // gone: write it again
    QR_ASSIGN_OR_RETURN(h, file_hash(path));
    if (h != rec["xxhash64"]) continue;  // damaged: write it again
    if (write[i]) ++reused;
    write[i] = false;
    state_["shards"][name] = rec;
  }
  return ok_status();
}

Result<bool> resume_finished(const std::string& out_dir, const nlohmann::json& parameters,
                             std::span<const std::string> planned) {
  QR_ASSIGN_OR_RETURN(complete, finished_with(out_dir, parameters));
  if (complete) return true;
  QR_TRY(refuse_unrecorded_files(out_dir, planned));
  return false;
}

Status check_same_run(const nlohmann::json& prev, const nlohmann::json& parameters,
                      const std::string& fingerprint, const nlohmann::json& stamp,
                      const std::string& path) {
  if (prev["parameters"] != parameters) {
    return Error(ErrorKind::kParameterMismatch,
                 fmt::format("the earlier partial run used parameters {}, this run {}; finish "
                             "it with the same flags or use a new output directory",
                             prev["parameters"].dump(), parameters.dump()))
        .in_file(path)
        .with_rule("resume.same_parameters");
  }
  if (prev["fingerprint"] != fingerprint) {
    return Error(ErrorKind::kParameterMismatch,
                 "the earlier partial run had another source layout or output plan")
        .in_file(path)
        .with_rule("resume.same_plan");
  }
  return check_source_stamp(prev, stamp, path);
}

Result<FileRun> start_file_run(std::vector<std::string> names,
                               std::span<const SafetensorsLayout> layouts,
                               const std::string& out_dir, const ContainerRun& run,
                               std::string source, nlohmann::json stamp,
                               const nlohmann::json& parameters,
                               const std::function<std::string()>& fingerprint) {
  std::vector<std::uint64_t> sizes;
  for (const SafetensorsLayout& l : layouts) sizes.push_back(l.file_size());
  return start_file_run(std::move(names), std::span<const std::uint64_t>(sizes), out_dir, run,
                        std::move(source), std::move(stamp), parameters, fingerprint);
}

Result<FileRun> start_file_run(std::vector<std::string> names, std::span<const std::uint64_t> sizes,
                               const std::string& out_dir, const ContainerRun& run,
                               std::string source, nlohmann::json stamp,
                               const nlohmann::json& parameters,
                               const std::function<std::string()>& fingerprint) {
  FileRun r;
  r.write.assign(names.size(), true);
  if (!run.resume && !run.shard) return r;
  std::optional<FinishedFiles> repair;
  if (run.shard) {
    r.write = assign_output_shards({sizes.begin(), sizes.end()}, *run.shard);
  } else if (path_kind((fs::path(out_dir) / kProgressFileName).string()) == PathKind::kMissing) {
    QR_ASSIGN_OR_RETURN(complete, resume_finished(out_dir, parameters, names));
    if (complete) {
      QR_ASSIGN_OR_RETURN(f, finished_files(out_dir, names, sizes));
      if (f.intact) {  // killed after it finished, before the caller saw it: nothing to do
        r.complete = true;
        return r;
      }
      // A finished output that lost a file or holds one of another size (deleted, replaced,
      // truncated): those are written again, the others kept, and the manifest, index and side
      // files written anew, as k3_repack.py rebuilds its index from every shard present.
      repair = std::move(f);
    }
  }
  r.state.emplace(std::move(names), out_dir, run.shard, std::move(source), std::move(stamp));
  QR_TRY(r.state->start(parameters, fingerprint(), r.write, r.reused));
  if (repair) {
    for (std::size_t i = 0; i < r.write.size(); ++i) {
      if (!repair->kept[i]) continue;
      r.write[i] = false;
      ++r.reused;
      QR_TRY(r.state->done(i));  // recorded with its hash, should this run be cut short too
    }
    QR_TRY(r.state->flush());
  }
  return r;
}

Result<std::uint64_t> run_files(std::span<const OutputFile> files, FileRun& run,
                                const std::string& out_dir, FileJobSource& jobs,
                                std::function<void(std::uint64_t)> on_progress) {
  FileJobsConfig config = fault_hooks_from_env();
  config.on_progress = std::move(on_progress);
  return run_file_jobs(files, run.write, out_dir, jobs, config, [&run](std::size_t i) -> Status {
    return run.state ? run.state->done(i) : ok_status();
  });
}

std::vector<OutputFile> output_files(std::span<const std::string> names,
                                     std::span<const SafetensorsLayout> layouts) {
  std::vector<OutputFile> files;
  for (std::size_t i = 0; i < names.size(); ++i) files.push_back({names[i], &layouts[i]});
  return files;
}

Status run_started_files(FileRun& run, std::span<const OutputFile> files,
                         const std::string& out_dir, bool shard, FileJobSource& jobs,
                         ContainerReport& rep, std::function<void(std::uint64_t)> on_progress) {
  if (run.complete) {
    rep.already_complete = true;
    rep.reused_files = files.size();
    return ok_status();
  }
  rep.reused_files = run.reused;
  for (const bool w : run.write) rep.files_written += w;
  QR_ASSIGN_OR_RETURN(read, run_files(files, run, out_dir, jobs, std::move(on_progress)));
  rep.bytes_read = read;
  if (run.state) {
    // Nothing is recorded as done from bytes that do not hash to what the server publishes.
    QR_TRY(remote::verify_opened_files(shard));
    QR_TRY(run.state->flush());
  }
  return ok_status();
}

std::vector<bool> files_of_worker(std::span<const SafetensorsLayout> layouts,
                                  const ShardTask& task) {
  std::vector<std::uint64_t> sizes;
  for (const SafetensorsLayout& l : layouts) sizes.push_back(l.file_size());
  return assign_output_shards(sizes, task);
}

}  // namespace qrepack
