#include "qrepack/io/output_txn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/fs_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTempTag = ".qrepack-tmp-";
constexpr int kLockAttempts = 8;

struct Split {
  std::string parent, name;
};

Split split(const std::string& path) {
  const fs::path p(normalize_output_path(path));
  return {p.has_parent_path() ? p.parent_path().string() : ".", p.filename().string()};
}

Error io_error(ErrorKind kind, const std::string& what, const std::string& path) {
  return Error(kind, fmt::format("{}: {}", what, std::strerror(errno))).in_file(path);
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some filesystems refuse fsync on directories
  ::close(fd);
}

}  // namespace

std::size_t remove_stale_temps(const std::string& dir, const std::string& name) {
  auto names = list_directory(dir);
  if (!names.ok()) return 0;
  const std::string prefix = name.empty() ? "." : "." + name + std::string(kTempTag);
  std::size_t removed = 0;
  for (const std::string& n : *names) {
    if (!n.starts_with(prefix) || n.find(kTempTag) == std::string::npos) continue;
    remove_tree((fs::path(dir) / n).string());
    ++removed;
  }
  return removed;
}

namespace {

std::string holder_of(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

}  // namespace

std::string normalize_output_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string temp_name_for(const std::string& name) {
  static std::atomic<unsigned> counter{0};
  return fmt::format(".{}{}{}-{}", name, kTempTag, ::getpid(), counter.fetch_add(1));
}

Result<OutputLock> OutputLock::acquire(const std::string& path) {
  const auto [parent, name] = split(path);
  if (name.empty() || name == "." || name == "..") {
    return Error(ErrorKind::kUsage, "the output must name a file or directory").in_file(path);
  }
  // Like `mkdir -p` for the parent (users pass -o runs/2026/out); OUT itself is never made here.
  std::error_code mkdir_error;
  fs::create_directories(parent, mkdir_error);
  if (mkdir_error) {
    return Error(ErrorKind::kIoOpen,
                 "cannot create the output's parent directory: " + mkdir_error.message())
        .in_file(path);
  }
  const std::string lock_path = (fs::path(parent) / fmt::format(".{}.qrepack-lock", name)).string();
  for (int attempt = 0; attempt < kLockAttempts; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return io_error(ErrorKind::kIoOpen, "cannot create the lock file", lock_path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const std::string pid = holder_of(fd);
      ::close(fd);
      return Error(ErrorKind::kOutputBusy,
                   fmt::format("another qrepack run (pid {}) is writing this output; wait for it "
                               "or choose another output",
                               pid))
          .in_file(path)
          .with_rule("output.lock");
    }
    // The previous holder may have removed the file between our open and flock: then this
    // lock guards nothing, so try again on the file now at the path.
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) != 0 || ::stat(lock_path.c_str(), &now) != 0 ||
        held.st_ino != now.st_ino || held.st_dev != now.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      ::close(fd);
      return io_error(ErrorKind::kIoWrite, "cannot write the lock file", lock_path);
    }
    OutputLock lock(lock_path, fd);
    // Holding the lock, every temp entry for this output belongs to a dead run.
    lock.stale_removed_ = remove_stale_temps(parent, name);
    if (path_kind(path) == PathKind::kDirectory) {
      lock.stale_removed_ += remove_stale_temps(normalize_output_path(path), "");
    }
    return lock;
  }
  return Error(ErrorKind::kOutputBusy, "the output's lock file keeps changing")
      .in_file(path)
      .with_rule("output.lock");
}

OutputLock::OutputLock(OutputLock&& other) noexcept
    : lock_path_(std::move(other.lock_path_)),
      fd_(std::exchange(other.fd_, -1)),
      stale_removed_(other.stale_removed_) {}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // still held: a waiting opener sees another inode and retries
  ::close(fd_);
}

Result<StagedDirectory> StagedDirectory::create(const std::string& out_path) {
  const std::string out = normalize_output_path(out_path);
  const PathKind kind = path_kind(out);
  if (kind == PathKind::kDirectory) {
    QR_ASSIGN_OR_RETURN(names, list_directory(out));
    if (!names.empty()) {
      return Error(ErrorKind::kOutputExists,
                   fmt::format("output directory is not empty (it holds {}); remove it or "
                               "choose another directory",
                               names.front()))
          .in_file(out)
          .with_rule("output.fresh_dir");
    }
  } else if (kind != PathKind::kMissing) {
    return Error(ErrorKind::kOutputExists, "output exists and is not a directory")
        .in_file(out)
        .with_rule("output.fresh_dir");
  }
  const auto [parent, name] = split(out);
  if (path_kind(parent) != PathKind::kDirectory) {
    return Error(ErrorKind::kIoOpen, "the output's parent directory does not exist")
        .in_file(out)
        .with_rule("output.parent");
  }
  const std::string staged = (fs::path(parent) / temp_name_for(name)).string();
  if (::mkdir(staged.c_str(), 0755) != 0) {
    return io_error(ErrorKind::kIoOpen, "cannot create the staging directory", staged);
  }
  return StagedDirectory(out, staged);
}

StagedDirectory::StagedDirectory(StagedDirectory&& other) noexcept
    : out_(std::move(other.out_)),
      staged_(std::move(other.staged_)),
      committed_(std::exchange(other.committed_, true)) {}

StagedDirectory::~StagedDirectory() {
  if (!committed_) remove_tree(staged_);
}

Status StagedDirectory::commit() {
  if (committed_) return ok_status();
  fsync_directory(staged_);
  if (::rename(staged_.c_str(), out_.c_str()) != 0) {
    return io_error(ErrorKind::kIoRename, "cannot move the finished output into place", out_);
  }
  committed_ = true;
  fsync_directory(split(out_).parent);
  return ok_status();
}

}  // namespace qrepack
