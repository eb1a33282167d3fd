// Byte files on the one executor (exec/byte_files.h): their jobs, and a whole run (state files
// for --resume and --shard, side files, qrepack.json).
#include "exec/byte_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "exec/container_io.h"
#include "exec/file_run_state.h"
#include "exec/run_state.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

class ByteFileJobs final : public FileJobSource {
 public:
  ByteFileJobs(std::span<const ByteFile> files, std::span<const ByteSource* const> sources)
      : files_(files), sources_(sources), buffers_(std::max<std::size_t>(1, thread_count())) {}

  Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) override {
    for (std::uint32_t i = 0; i < files_.size(); ++i) {
      if (!write[i]) continue;
      for (std::uint32_t k = 0; k < files_[i].jobs.size(); ++k) {
        FileJob j;
        j.file = i;
        j.unit = k;
        out.push_back(j);
      }
    }
    return ok_status();
  }

  Result<std::uint64_t> run(const FileJob& j, std::size_t worker, FileWriter& w) override {
    RawVector<std::uint8_t>& buf = buffers_[worker];
    std::uint64_t read = 0;
    for (const BytePiece& p : files_[j.file].jobs[j.unit].pieces) {
      if (!p.is_copy()) {
        QR_TRY(w.write(j.file, p.at, p.literal));
        continue;
      }
      for (std::uint64_t done = 0; done < p.size;) {
        const std::uint64_t n = std::min(kByteCopyChunk, p.size - done);
        buf.resize(n);
        QR_TRY(sources_[p.source]->read_at(p.from + done, buf));
        QR_TRY(w.write(j.file, p.at + done, buf));
        done += n;
        read += n;
      }
    }
    return read;
  }

 private:
  std::span<const ByteFile> files_;
  std::span<const ByteSource* const> sources_;
  std::vector<RawVector<std::uint8_t>> buffers_;  ///< one per worker
};

Status write_side_file(const std::string& path, const std::string& text) {
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}));
  return sink->commit();
}

std::string fingerprint(std::span<const ByteFile> files) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  hash_byte_files(st, files);
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", h);
}

}  // namespace

std::unique_ptr<FileJobSource> byte_file_jobs(std::span<const ByteFile> files,
                                              std::span<const ByteSource* const> sources) {
  return std::make_unique<ByteFileJobs>(files, sources);
}

Result<ContainerReport> write_byte_files(const ByteRunPlan& plan, const ByteRunSources& from,
                                         const std::string& out_dir, const ContainerRun& run,
                                         ProgressMode progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> source_sizes;
  for (const ByteSource* s : from.sources) source_sizes.push_back(s->size());
  QR_TRY(validate_byte_files(plan.files, source_sizes));
  ContainerReport rep;
  rep.files = plan.files.size();
  std::vector<std::string> names;
  std::vector<std::uint64_t> sizes;
  for (const ByteFile& f : plan.files) {
    names.push_back(f.name);
    sizes.push_back(f.size);
    rep.bytes_written += f.size;
    rep.tensors += f.jobs.size();
  }
  QR_ASSIGN_OR_RETURN(fr, start_file_run(std::move(names), std::span<const std::uint64_t>(sizes),
                                         out_dir, run, from.path, from.stamp, plan.parameters,
                                         [&] { return fingerprint(plan.files); }));
  std::vector<OutputFile> files;
  std::uint64_t copy_bytes = 0;
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    files.push_back({plan.files[i].name, nullptr, plan.files[i].size});
    if (fr.complete || !fr.write[i]) continue;
    for (const ByteJob& j : plan.files[i].jobs) {
      for (const BytePiece& p : j.pieces) copy_bytes += p.is_copy() ? p.size : 0;
    }
  }
  ProgressLine line(copy_bytes, progress);
  const auto jobs = byte_file_jobs(plan.files, from.sources);
  QR_TRY(run_started_files(fr, files, out_dir, run.shard != nullptr, *jobs, rep,
                           [&](std::uint64_t done) { line.update("copying", done); }));
  if (rep.already_complete) return rep;
  line.finish();
  if (!run.shard) {  // a worker leaves the rest to merge
    for (const auto& [name, text] : plan.side_files) {
      QR_TRY(write_side_file((fs::path(out_dir) / name).string(), text));
    }
    nlohmann::ordered_json m = plan.manifest;
    nlohmann::ordered_json listed = nlohmann::ordered_json::array();
    for (const ByteFile& f : plan.files) listed.push_back({{"name", f.name}, {"bytes", f.size}});
    for (const auto& side : plan.side_files) {
      listed.push_back({{"name", side.first}, {"side_file", true}});
    }
    QR_TRY(write_manifest_tail(m, std::move(listed), rep.bytes_written, plan.sources, out_dir));
    if (fr.state) fr.state->remove();  // complete: the manifest replaces the progress file
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
