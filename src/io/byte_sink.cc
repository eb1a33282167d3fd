#include "qrepack/io/byte_sink.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "qrepack/io/output_txn.h"

namespace qrepack {
namespace {

// Small writes gather here: allocated whole on the first one (no doubling), freed at prepare.
constexpr std::size_t kWriteBuffer = std::size_t{1} << 20;
// Writes at least this large skip the buffer (a copy costs more than the system call).
constexpr std::size_t kDirectWrite = std::size_t{256} << 10;

Error io_error(ErrorKind kind, const std::string& what, const std::string& path) {
  return Error(kind, fmt::format("{}: {}", what, std::strerror(errno))).in_file(path);
}

Status write_all(int fd, std::span<const std::uint8_t> bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(ErrorKind::kIoWrite, "write failed", path);
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
}

bool on_tmpfs(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// Bytes an unprivileged writer may still use on fd's filesystem (0 when unknown).
std::uint64_t free_bytes(int fd) {
  struct statvfs vfs {};
  if (::fstatvfs(fd, &vfs) != 0) return 0;
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(std::uint64_t{vfs.f_bavail}, std::uint64_t{vfs.f_frsize}, &bytes)) {
    return UINT64_MAX;
  }
  return bytes;
}

}  // namespace

Result<std::unique_ptr<AtomicFileSink>> AtomicFileSink::create(const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  const std::string temp = (dir / temp_name_for(p.filename().string())).string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(ErrorKind::kIoOpen, "cannot create temp file " + temp, path);
  return std::unique_ptr<AtomicFileSink>(new AtomicFileSink(path, temp, fd));
}

AtomicFileSink::~AtomicFileSink() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

Status AtomicFileSink::flush() {
  QR_TRY(write_all(fd_, buffer_, path_));
  buffer_.clear();
  return ok_status();
}

Status AtomicFileSink::write(std::span<const std::uint8_t> bytes) {
  if (prepared_ || fd_ < 0) return Error(ErrorKind::kIoWrite, "write after commit").in_file(path_);
  position_ += bytes.size();
  if (buffer_.size() + bytes.size() > kWriteBuffer || bytes.size() >= kDirectWrite) {
    QR_TRY(flush());
  }
  if (bytes.size() >= kDirectWrite) {
    return write_all(fd_, bytes, path_);  // large chunks go straight to the file, no copy
  }
  if (buffer_.capacity() == 0) buffer_.reserve(kWriteBuffer);
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  return ok_status();
}

Status ByteSink::patch(std::uint64_t, std::span<const std::uint8_t>) {
  return Error(ErrorKind::kIoWrite, "this output cannot be rewritten in place").in_file(name());
}

Status AtomicFileSink::patch(std::uint64_t offset, std::span<const std::uint8_t> bytes) {
  if (prepared_ || fd_ < 0) return Error(ErrorKind::kIoWrite, "patch after commit").in_file(path_);
  QR_CHECK(offset + bytes.size() <= position_, "AtomicFileSink::patch: past the written bytes");
  QR_TRY(flush());
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(ErrorKind::kIoWrite, "write failed", path_);
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
}

Status AtomicFileSink::reserve(std::uint64_t bytes) {
  if (prepared_ || fd_ < 0)
    return Error(ErrorKind::kIoWrite, "reserve after commit").in_file(path_);
  if (bytes <= reserved_ || bytes > static_cast<std::uint64_t>(INT64_MAX)) return ok_status();
  if (on_tmpfs(fd_)) {
    // fallocate there allocates and clears the memory itself, on one thread, before any data
    // is produced (a fifth of a 4 GB conversion's time): check the free space instead and
    // let the pages be allocated as the data is written.
    const std::uint64_t free = free_bytes(fd_);
    if (bytes <= free) return ok_status();
    return Error(ErrorKind::kIoWrite,
                 fmt::format("cannot allocate the {}-byte file: {} ({} bytes free)", bytes,
                             std::strerror(ENOSPC), free))
        .in_file(path_)
        .with_rule("output.space");
  }
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) {
    reserved_ = bytes;
    return ok_status();
  }
  if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) return ok_status();
  return Error(ErrorKind::kIoWrite,
               fmt::format("cannot allocate the {}-byte file: {}", bytes, std::strerror(errno)))
      .in_file(path_)
      .with_rule("output.space");
}

Status AtomicFileSink::prepare() {
  if (prepared_) return ok_status();
  QR_TRY(flush());
  buffer_ = {};  // a prepared file may wait for others: hold no memory meanwhile
  if (reserved_ > position_ && ::ftruncate(fd_, static_cast<off_t>(position_)) != 0) {
    return io_error(ErrorKind::kIoWrite, "cannot trim the reserved file", path_);
  }
  if (::fsync(fd_) != 0) return io_error(ErrorKind::kIoSync, "fsync failed", path_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return io_error(ErrorKind::kIoWrite, "close failed", path_);
  prepared_ = true;
  return ok_status();
}

Status AtomicFileSink::publish() {
  if (committed_) return ok_status();
  if (!prepared_) return Error(ErrorKind::kIoWrite, "publish before prepare").in_file(path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return io_error(ErrorKind::kIoRename, "cannot rename temp file into place", path_);
  }
  committed_ = true;
  const std::filesystem::path p(path_);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some filesystems refuse fsync on directories
    ::close(dfd);
  }
  return ok_status();
}

Status AtomicFileSink::commit() {
  QR_TRY(prepare());
  return publish();
}

Status MemorySink::write(std::span<const std::uint8_t> bytes) {
  if (committed_) return Error(ErrorKind::kIoWrite, "write after commit").in_file(name_);
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  return ok_status();
}

Status MemorySink::patch(std::uint64_t offset, std::span<const std::uint8_t> bytes) {
  QR_CHECK(offset + bytes.size() <= bytes_.size(), "MemorySink::patch: past the written bytes");
  std::copy(bytes.begin(), bytes.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset));
  return ok_status();
}

Status MemorySink::commit() {
  committed_ = true;
  return ok_status();
}

}  // namespace qrepack
