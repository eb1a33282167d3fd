// `convert --mtp` and `convert --indexer`: a pass adds its own shards (out-mtp-NNNNN,
// out-idx-NNNNN) and manifest (qrepack-mtp.json, qrepack-indexer.json) to a directory that
// holds the main conversion, or to an empty one. The main shards are never opened for
// writing; the index is rewritten to name every tensor of the directory. Files are published
// shards first, then the manifest, then the index, so a pass killed half way leaves at most
// its own shards, which the next run of it removes.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "exec/entry_jobs.h"
#include "exec/manifest.h"
#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/io/side_files.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMaxConfigBytes = 16ull << 20;

// A finished pass in the directory: nothing to do with the same parameters, refused with
// others (the converter's own failures: a pass over a finished container with other flags).
Result<bool> pass_finished(const std::string& manifest, const nlohmann::json& parameters,
                           ConvertPass p) {
  if (path_kind(manifest) == PathKind::kMissing) return false;
  QR_ASSIGN_OR_RETURN(m,
                      read_json_file(manifest, ErrorKind::kParameterMismatch, kMaxManifestBytes));
  if (m.is_object() && m.contains("parameters") && m["parameters"] == parameters) return true;
  const std::string dump = m.is_object() && m.contains("parameters") ? m["parameters"].dump() : "?";
  return Error(ErrorKind::kOutputExists,
               fmt::format("the directory already holds a finished --{} pass made with {}; this "
                           "run asks for {} (remove {}*.safetensors and {} to redo it)",
                           convert_pass_name(p), dump, parameters.dump(), pass_file_prefix(p),
                           fs::path(manifest).filename().string()))
      .in_file(manifest)
      .with_rule("pass.finished");
}

// Shards of this pass without its manifest are a dead run's (the manifest is published after
// them): removed under the caller's lock.
Result<std::size_t> remove_dead_pass_shards(const std::string& dir, ConvertPass p) {
  QR_ASSIGN_OR_RETURN(names, list_directory(dir));
  std::size_t removed = 0;
  for (const std::string& n : names) {
    if (n.starts_with(pass_file_prefix(p)) && n.ends_with(".safetensors")) {
      std::error_code ec;
      fs::remove(fs::path(dir) / n, ec);
      if (ec) {
        return Error(ErrorKind::kIoWrite, "cannot remove a dead pass's shard: " + ec.message())
            .in_file((fs::path(dir) / n).string());
      }
      ++removed;
    }
  }
  return removed;
}

Result<bool> holds_safetensors(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(names, list_directory(dir));
  return std::any_of(names.begin(), names.end(), [](const std::string& n) {
    return n.ends_with(".safetensors") && !n.starts_with(".");
  });
}

// The directory's config.json (the main run copied it) must be the source's: a pass adds to
// the same model only.
Status check_same_model(const std::string& src_dir, const std::string& out_dir) {
  const std::string a = (fs::path(src_dir) / "config.json").string();
  const std::string b = (fs::path(out_dir) / "config.json").string();
  if (path_kind(a) != PathKind::kRegular || path_kind(b) != PathKind::kRegular) return ok_status();
  QR_ASSIGN_OR_RETURN(x, read_small_file(a, kMaxConfigBytes));
  QR_ASSIGN_OR_RETURN(y, read_small_file(b, kMaxConfigBytes));
  if (x == y) return ok_status();
  return Error(ErrorKind::kParameterMismatch,
               "the directory's config.json differs from the source's: a pass adds to the "
               "conversion of the same model only")
      .in_file(b)
      .with_rule("pass.same_model");
}

// No output of the pass may already be in the directory (a main run with --keep-mtp kept the
// MTP layer as stored, say).
Status check_no_collision(const Checkpoint& existing, const ConvertPlan& plan) {
  for (const TensorView& t : plan.outputs) {
    if (const auto found = existing.find(t.name)) {
      return Error(
                 ErrorKind::kOutputExists,
                 fmt::format("the directory already holds this tensor (in {})",
                             fs::path(existing.shards()[found->shard].path()).filename().string()))
          .in_file(existing.directory())
          .in_tensor(t.name)
          .with_rule("pass.collision");
    }
  }
  return ok_status();
}

// The index over every file of the directory once the pass is in; null while one file holds
// everything (a single model.safetensors needs none).
Result<std::unique_ptr<AtomicFileSink>> merged_index(const std::string& dir,
                                                     const Checkpoint* existing,
                                                     const ShardPlan& shards) {
  std::vector<std::pair<std::string_view, std::string_view>> names;
  std::vector<std::string> existing_files;
  std::uint64_t total = shards.total_size;
  if (existing) {
    total += existing->total_size();
    for (const SafetensorsFile& f : existing->shards()) {
      existing_files.push_back(fs::path(f.path()).filename().string());
    }
    for (const TensorRef t : existing->tensors()) {
      names.emplace_back(t.entry->name, existing_files[t.shard]);
    }
  }
  if (existing_files.size() + shards.file_names.size() < 2) {
    return std::unique_ptr<AtomicFileSink>();
  }
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    for (const TensorView& t : shards.layouts[s].tensors) {
      names.emplace_back(t.name, shards.file_names[s]);
    }
  }
  return prepare_index_file(dir, total, std::move(names));
}

}  // namespace

std::string_view pass_file_prefix(ConvertPass p) {
  return p == ConvertPass::kMtp ? "out-mtp-" : "out-idx-";
}

Result<ConvertReport> execute_pass(const Checkpoint& ck, const ConvertPlan& plan,
                                   const ConvertOptions& o, const std::string& out_dir,
                                   const nlohmann::json& parameters) {
  const auto t0 = std::chrono::steady_clock::now();
  ConvertReport rep;
  std::error_code mkdir_error;
  fs::create_directories(out_dir, mkdir_error);
  if (mkdir_error) {
    return Error(ErrorKind::kIoOpen, "cannot create directory: " + mkdir_error.message())
        .in_file(out_dir);
  }
  const std::string manifest_path =
      (fs::path(out_dir) / fmt::format("qrepack-{}.json", convert_pass_name(o.pass))).string();
  QR_ASSIGN_OR_RETURN(done, pass_finished(manifest_path, parameters, o.pass));
  QR_ASSIGN_OR_RETURN(shards,
                      plan_output_shards(plan, o.max_shard_bytes, pass_file_prefix(o.pass)));
  if (done) {
    rep.already_complete = true;
    rep.shards = rep.reused_shards = shards.file_names.size();
    rep.outputs = plan.outputs.size();
    return rep;
  }
  QR_ASSIGN_OR_RETURN(dead, remove_dead_pass_shards(out_dir, o.pass));
  (void)dead;
  QR_TRY(check_same_model(ck.directory(), out_dir));
  std::optional<Checkpoint> existing;
  QR_ASSIGN_OR_RETURN(has_main, holds_safetensors(out_dir));
  if (has_main) {
    QR_ASSIGN_OR_RETURN(e, Checkpoint::open(out_dir));
    existing.emplace(std::move(e));
    QR_TRY(check_no_collision(*existing, plan));
    if (plan.stamped) {
      QR_ASSIGN_OR_RETURN(stamps, read_format_stamps(*existing));
      if (stamps.size() + plan.stamped > kMaxFormatStamps) {
        return Error(ErrorKind::kLimitExceeded,
                     fmt::format("the directory would carry {} format stamps; the engine refuses "
                                 "more than {}",
                                 stamps.size() + plan.stamped, kMaxFormatStamps))
            .in_file(out_dir)
            .with_rule("container.stamp_count");
      }
    }
  }
  OutputHashes hashes(shards);
  ProgressLine progress(source_bytes(plan), o.progress);
  const std::vector<bool> write(shards.file_names.size(), true);
  QR_ASSIGN_OR_RETURN(read, write_shards(ck, plan, shards, write, out_dir, o.job_bytes, hashes,
                                         &progress, nullptr));
  rep.bytes_read = read;
  progress.finish();
  // Shards are in place; then the manifest, the side files and the merged index.
  QR_ASSIGN_OR_RETURN(manifest,
                      write_manifest(manifest_path, ck, plan, parameters, hashes, shards, o.pass));
  QR_TRY(manifest->prepare());
  std::vector<std::unique_ptr<AtomicFileSink>> side;
  if (path_kind((fs::path(out_dir) / "config.json").string()) == PathKind::kMissing) {
    QR_ASSIGN_OR_RETURN(staged, stage_side_files(ck.directory(), out_dir));
    side = std::move(staged);
  }
  QR_ASSIGN_OR_RETURN(index, merged_index(out_dir, existing ? &*existing : nullptr, shards));
  QR_TRY(manifest->publish());
  for (auto& f : side) QR_TRY(f->publish());
  if (index) QR_TRY(index->publish());
  rep.outputs = plan.outputs.size();
  rep.shards = rep.shards_written = shards.file_names.size();
  rep.bytes_written = hashes.written();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
