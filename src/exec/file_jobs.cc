// run_file_jobs (exec/file_jobs.h): jobs taken in order from one counter by every worker, each
// writing with pwrite at offsets the plan fixed; files opened on their first job and published
// on their last.
#include "exec/file_jobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

#include "exec/container_io.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/output_txn.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// Bytes handed to the worker writing a file while another was: written by it, in order.
struct PendingWrite {
  std::uint64_t offset;
  std::vector<std::uint8_t> bytes;
};

// Bytes a file's writer may hold for others before they wait (per file).
constexpr std::uint64_t kMaxPendingBytes = std::uint64_t{64} << 20;

struct FileState {
  std::mutex mu;
  int fd = -1;
  std::string temp;                       ///< the temp file's path while it is written
  std::atomic<std::size_t> remaining{0};  ///< jobs writing it not yet done
  // One writer at a time: two threads' pwrite into one file serialize on its inode lock, and
  // the kernel spins the second while the first copies (a fifth of the run on 2 cores). A
  // worker that finds the file busy hands its bytes over and goes on encoding.
  std::mutex write_mu;
  std::condition_variable write_cv;
  bool writing = false;
  std::deque<PendingWrite> pending;
  std::uint64_t pending_bytes = 0;
  std::optional<Error> write_error;  ///< the first failed write, reported by finish_file
};

std::uint64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  return v ? parse_decimal(v, 12).value_or(0) : 0;
}

class FileJobs final : public FileWriter {
 public:
  FileJobs(std::span<const OutputFile> files, std::string dir, FileJobSource& source,
           const FileJobsConfig& config)
      : files_(files), dir_(std::move(dir)), source_(source), config_(config) {}

  ~FileJobs() override {
    for (auto& f : state_) {
      if (!f || f->fd < 0) continue;
      ::close(f->fd);
      ::unlink(f->temp.c_str());  // a failed run leaves no temp file
    }
  }

  Status run(const std::vector<bool>& write, const std::function<Status(std::size_t)>& on_done) {
    on_done_ = &on_done;
    state_.resize(files_.size());
    for (auto& f : state_) f = std::make_unique<FileState>();
    QR_TRY(source_.make_jobs(write, jobs_));
    std::vector<bool> has_job(files_.size(), false);
    for (const FileJob& j : jobs_) {
      ++state_[j.file]->remaining;
      has_job[j.file] = true;
      if (j.file2 != FileJob::kNone) ++state_[j.file2]->remaining, has_job[j.file2] = true;
    }
    // A file no job writes (no data bytes) still gets one that creates it, in its place.
    std::vector<FileJob> all;
    all.reserve(jobs_.size());
    std::size_t k = 0;
    for (std::uint32_t f = 0; f < files_.size(); ++f) {
      while (k < jobs_.size() && jobs_[k].file <= f) all.push_back(jobs_[k++]);
      if (write[f] && !has_job[f]) {
        all.push_back({f, FileJob::kNone, 0, 0, 0, 0, true});
        ++state_[f]->remaining;
      }
    }
    while (k < jobs_.size()) all.push_back(jobs_[k++]);
    jobs_ = std::move(all);
    return execute();
  }

  // Writes `bytes` now, or hands them to the worker writing the file (see FileState); the
  // writer then writes what others handed over until none is left.
  Status write(std::uint32_t file, std::uint64_t offset,
               std::span<const std::uint8_t> bytes) override {
    FileState& f = *state_[file];
    std::unique_lock lock(f.write_mu);
    if (f.write_error) return *f.write_error;
    f.write_cv.wait(lock, [&] { return !f.writing || f.pending_bytes < kMaxPendingBytes; });
    if (f.writing) {
      std::vector<std::uint8_t> copy = spare_buffer(bytes.size());
      copy.assign(bytes.begin(), bytes.end());
      f.pending.push_back({offset, std::move(copy)});
      f.pending_bytes += bytes.size();
      return ok_status();
    }
    f.writing = true;
    lock.unlock();
    const std::uint64_t header = files_[file].header_size();
    Status st = pwrite_all(f.fd, bytes, header + offset, path_of(file));
    for (;;) {
      lock.lock();
      if (!st.ok() && !f.write_error) f.write_error = st.error();
      if (f.pending.empty() || f.write_error) {
        f.writing = false;
        f.write_cv.notify_all();
        return f.write_error ? Status(*f.write_error) : ok_status();
      }
      PendingWrite next = std::move(f.pending.front());
      f.pending.pop_front();
      f.pending_bytes -= next.bytes.size();
      f.write_cv.notify_all();
      lock.unlock();
      st = pwrite_all(f.fd, next.bytes, header + next.offset, path_of(file));
      return_buffer(std::move(next.bytes));
    }
  }

  std::uint64_t bytes_read() const { return bytes_read_; }

  // Buffers of handed-over writes are reused (a fresh one of megabytes would fault its pages
  // in every time); at most a few per worker are kept.
  // The smallest that holds `size` bytes, else the largest (grown by its user).
  std::vector<std::uint8_t> spare_buffer(std::size_t size) {
    std::lock_guard lock(spare_mu_);
    if (spare_.empty()) return {};
    std::size_t pick = 0;
    for (std::size_t i = 1; i < spare_.size(); ++i) {
      const std::size_t c = spare_[i].capacity(), p = spare_[pick].capacity();
      if (p >= size ? c >= size && c < p : c > p) pick = i;
    }
    std::vector<std::uint8_t> b = std::move(spare_[pick]);
    spare_[pick] = std::move(spare_.back());
    spare_.pop_back();
    return b;
  }
  void return_buffer(std::vector<std::uint8_t> b) {
    std::lock_guard lock(spare_mu_);
    if (spare_.size() < 4 * std::max<std::size_t>(1, thread_count()))
      spare_.push_back(std::move(b));
  }

 private:
  Error io_error(const std::string& path, std::string_view what) const {
    return Error(ErrorKind::kIoWrite, fmt::format("{}: {}", what, std::strerror(errno)))
        .in_file(path);
  }

  std::string path_of(std::uint32_t file) const {
    return (fs::path(dir_) / files_[file].name).string();
  }

  // Creates file i's temp file at its final size with its header, waiting while
  // kMaxOpenOutputs files are open (those finish: their jobs were all taken before this one).
  // False when the run stopped on another job's error meanwhile.
  Result<bool> open_file(std::uint32_t i) {
    FileState& f = *state_[i];
    std::lock_guard file_lock(f.mu);
    if (f.fd >= 0) return true;
    {
      std::unique_lock lock(open_mu_);
      open_cv_.wait(lock, [&] { return open_count_ < kMaxOpenOutputs || failed_.load(); });
      if (failed_.load()) return false;
      ++open_count_;
    }
    f.temp = (fs::path(dir_) / temp_name_for(std::string(files_[i].name))).string();
    f.fd = ::open(f.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f.fd < 0) {
      release_slot();
      return io_error(path_of(i), "cannot create");
    }
    if (::ftruncate(f.fd, static_cast<off_t>(files_[i].file_size())) != 0) {
      return io_error(path_of(i), "cannot size");
    }
    if (files_[i].layout) {
      QR_TRY(pwrite_all(f.fd, safetensors_header_bytes(*files_[i].layout), 0, path_of(i)));
    }
    return true;
  }

  void release_slot() {
    {
      std::lock_guard lock(open_mu_);
      --open_count_;
    }
    open_cv_.notify_all();
  }

  // File i's last job is done: fsync, close, rename into place, then on_done.
  Status finish_file(std::uint32_t i) {
    FileState& f = *state_[i];
    {  // what others handed over is written first
      std::unique_lock lock(f.write_mu);
      f.write_cv.wait(lock, [&] { return !f.writing; });
      if (f.write_error) return *f.write_error;
    }
    const int fd = f.fd;
    f.fd = -1;
    const bool synced = ::fsync(fd) == 0;
    const bool closed = ::close(fd) == 0;
    release_slot();
    if (!synced || !closed) {
      ::unlink(f.temp.c_str());
      return io_error(path_of(i), "fsync/close");
    }
    if (::rename(f.temp.c_str(), path_of(i).c_str()) != 0) {
      ::unlink(f.temp.c_str());
      return io_error(path_of(i), "cannot rename into place");
    }
    std::lock_guard lock(done_mu_);
    QR_TRY((*on_done_)(i));
    if (config_.kill_after_files && ++files_done_ >= config_.kill_after_files) std::raise(SIGKILL);
    return ok_status();
  }

  Status run_one(std::size_t j, std::size_t worker) {
    const FileJob& job = jobs_[j];
    for (const std::uint32_t f : {job.file, job.file2}) {
      if (f == FileJob::kNone) continue;
      QR_ASSIGN_OR_RETURN(opened, open_file(f));
      if (!opened) return ok_status();  // another job failed: execute() stops
    }
    if (!job.create_only) {
      QR_ASSIGN_OR_RETURN(read, source_.run(job, worker, *this));
      std::lock_guard lock(progress_mu_);
      bytes_read_ += read;
      if (config_.on_progress) config_.on_progress(bytes_read_);
    }
    for (const std::uint32_t f : {job.file, job.file2}) {
      if (f != FileJob::kNone && state_[f]->remaining.fetch_sub(1) == 1) QR_TRY(finish_file(f));
    }
    const std::uint64_t done = jobs_done_.fetch_add(1) + 1;
    if (config_.kill_after_jobs && done >= config_.kill_after_jobs) std::raise(SIGKILL);
    return ok_status();
  }

  Status execute() {
    const std::size_t workers = std::max<std::size_t>(1, thread_count());
    std::atomic<std::size_t> next{0};
    std::mutex mu;
    std::optional<std::pair<std::size_t, Error>> first_error;
    parallel_for(workers, 1, [&](std::size_t b, std::size_t e, std::size_t worker) {
      for (std::size_t k = b; k < e; ++k) {
        for (;;) {
          const std::size_t j = next.fetch_add(1);
          if (j >= jobs_.size() || failed_.load()) return;
          Status st = run_one(j, worker);
          if (!st.ok()) {
            std::lock_guard lock(mu);
            if (!failed_.exchange(true)) open_cv_.notify_all();
            if (!first_error || first_error->first > j) first_error.emplace(j, st.error());
            return;
          }
        }
      }
    });
    if (first_error) return std::move(first_error->second);
    return ok_status();
  }

  std::span<const OutputFile> files_;
  std::string dir_;
  FileJobSource& source_;
  const FileJobsConfig& config_;
  const std::function<Status(std::size_t)>* on_done_ = nullptr;
  std::vector<std::unique_ptr<FileState>> state_;
  std::vector<FileJob> jobs_;
  std::atomic<std::uint64_t> jobs_done_{0};
  std::atomic<bool> failed_{false};
  std::mutex open_mu_, done_mu_, progress_mu_, spare_mu_;
  std::vector<std::vector<std::uint8_t>> spare_;
  std::condition_variable open_cv_;
  std::size_t open_count_ = 0;
  std::uint64_t files_done_ = 0;  ///< under done_mu_
  std::uint64_t bytes_read_ = 0;  ///< under progress_mu_
};

}  // namespace

FileJobsConfig fault_hooks_from_env() {
  FileJobsConfig c;
  c.kill_after_jobs = env_count("QREPACK_FAULT_KILL_AFTER_JOBS");
  c.kill_after_files = env_count("QREPACK_FAULT_KILL_AFTER_FILES");
  return c;
}

Result<std::uint64_t> run_file_jobs(std::span<const OutputFile> files,
                                    const std::vector<bool>& write, const std::string& dir,
                                    FileJobSource& source, const FileJobsConfig& config,
                                    const std::function<Status(std::size_t)>& on_done) {
  FileJobs jobs(files, dir, source, config);
  QR_TRY(jobs.run(write, on_done));
  return jobs.bytes_read();
}

Result<std::vector<std::uint64_t>> xxhash64_of_ranges(
    const std::string& path, std::span<const std::pair<std::uint64_t, std::uint64_t>> ranges) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error(ErrorKind::kIoRead, fmt::format("cannot open: {}", std::strerror(errno)))
        .in_file(path);
  }
  // One buffer per thread for the whole run: the file was just written and its pages are in
  // the page cache, so this is a copy, not I/O.
  thread_local std::vector<std::uint8_t> buf(std::size_t{1} << 20);
  XXH64_state_t* st = XXH64_createState();
  std::vector<std::uint64_t> out;
  out.reserve(ranges.size());
  Status status = ok_status();
  for (const auto& [offset, size] : ranges) {
    XXH64_reset(st, 0);
    for (std::uint64_t at = 0; at < size && status.ok();) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - at));
      const ssize_t got = ::pread(fd, buf.data(), n, static_cast<off_t>(offset + at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        status = Error(ErrorKind::kIoRead, "a finished output file is shorter than planned")
                     .in_file(path);
        break;
      }
      XXH64_update(st, buf.data(), static_cast<std::size_t>(got));
      at += static_cast<std::uint64_t>(got);
    }
    if (!status.ok()) break;
    out.push_back(XXH64_digest(st));
  }
  XXH64_freeState(st);
  ::close(fd);
  if (!status.ok()) return std::move(status.error());
  return out;
}

}  // namespace qrepack
