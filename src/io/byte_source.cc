#include "qrepack/io/byte_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "qrepack/core/checked.h"
#include "remote/paths.h"
#include "remote/remote_file.h"

namespace qrepack {

namespace {

Error open_error(int err, const std::string& path) {
  return Error(err == ENOENT  ? ErrorKind::kInputNotFound
               : err == ELOOP ? ErrorKind::kNotRegularFile
                              : ErrorKind::kIoOpen,
               fmt::format("cannot open: {}", std::strerror(err)))
      .in_file(path);
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Opens `path` read-only without blocking on a FIFO, and stats it.
Result<int> open_stat(const std::string& path, struct stat& st) {
  // O_NONBLOCK: opening a FIFO or a device must not wait for a writer; only regular files are
  // read, so the flag changes nothing for what passes the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return open_error(errno, path);
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error(ErrorKind::kIoOpen, fmt::format("cannot stat: {}", std::strerror(err)))
        .in_file(path);
  }
  return fd;
}

}  // namespace

// The process's open descriptors of FileSources, at most kMaxOpenFiles unpinned: the least
// recently used one is closed to make room, and reopened (and checked) when read again. A
// descriptor in use by a read is pinned and never closed under it.
class OpenFiles {
 public:
  static OpenFiles& get() {
    static OpenFiles* files = new OpenFiles();  // never destroyed: FileSources may outlive main
    return *files;
  }

  // Registers `f`'s freshly opened descriptor.
  void add(const FileSource* f, int fd) {
    std::lock_guard lock(mu_);
    make_room();
    open_[f] = Slot{fd, 0, ++clock_};
  }

  // A descriptor of `f` pinned for one read: its own, or `f` reopened and checked.
  Result<int> acquire(const FileSource* f) {
    {
      std::lock_guard lock(mu_);
      if (const auto it = open_.find(f); it != open_.end()) {
        ++it->second.pins;
        it->second.used = ++clock_;
        return it->second.fd;
      }
    }
    struct stat st {};
    QR_ASSIGN_OR_RETURN(fd, open_stat(f->path_, st));
    if (static_cast<std::uint64_t>(st.st_dev) != f->device_ ||
        static_cast<std::uint64_t>(st.st_ino) != f->inode_ ||
        static_cast<std::uint64_t>(st.st_size) != f->size_ || mtime_ns(st) != f->mtime_ns_) {
      ::close(fd);
      return Error(ErrorKind::kIoRead,
                   "the file changed since it was opened (another file, size or modification "
                   "time): its header no longer describes it")
          .in_file(f->path_)
          .with_rule("input.unchanged");
    }
    std::lock_guard lock(mu_);
    if (const auto it = open_.find(f); it != open_.end()) {  // another thread reopened it
      ::close(fd);
      ++it->second.pins;
      it->second.used = ++clock_;
      return it->second.fd;
    }
    make_room();
    open_[f] = Slot{fd, 1, ++clock_};
    return fd;
  }

  void release(const FileSource* f) {
    std::lock_guard lock(mu_);
    if (const auto it = open_.find(f); it != open_.end()) --it->second.pins;
  }

  void remove(const FileSource* f) {
    std::lock_guard lock(mu_);
    if (const auto it = open_.find(f); it != open_.end()) {
      ::close(it->second.fd);
      open_.erase(it);
    }
  }

 private:
  struct Slot {
    int fd;
    int pins;
    std::uint64_t used;
  };
  // Closes least recently used unpinned descriptors until one more fits (pinned ones may
  // exceed the cap briefly: at most one per reading thread).
  void make_room() {
    while (open_.size() >= kMaxOpenFiles) {
      auto victim = open_.end();
      for (auto it = open_.begin(); it != open_.end(); ++it) {
        if (it->second.pins == 0 &&
            (victim == open_.end() || it->second.used < victim->second.used)) {
          victim = it;
        }
      }
      if (victim == open_.end()) return;
      ::close(victim->second.fd);
      open_.erase(victim);
    }
  }
  std::mutex mu_;
  std::unordered_map<const FileSource*, Slot> open_;
  std::uint64_t clock_ = 0;
};

Result<std::shared_ptr<const ByteSource>> open_byte_source(const std::string& path) {
  if (remote::is_remote_path(path)) {
    const auto loc = remote::locate(path);
    if (!loc || loc->name.empty()) {
      return Error(ErrorKind::kInputNotFound, "no such remote file").in_file(path);
    }
    QR_ASSIGN_OR_RETURN(f, loc->repo->open_file(loc->name));
    return std::shared_ptr<const ByteSource>(std::move(f));
  }
  QR_ASSIGN_OR_RETURN(f, FileSource::open(path));
  return std::shared_ptr<const ByteSource>(std::move(f));
}

Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  struct stat st {};
  QR_ASSIGN_OR_RETURN(fd, open_stat(path, st));
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error(ErrorKind::kNotRegularFile,
                 S_ISDIR(st.st_mode) ? "a directory where a file is required"
                                     : "not a regular file (a FIFO, socket or device is never read "
                                       "as data)")
        .in_file(path)
        .with_rule("input.regular_file");
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<FileSource> f(new FileSource(
      path, static_cast<std::uint64_t>(st.st_size), static_cast<std::uint64_t>(st.st_dev),
      static_cast<std::uint64_t>(st.st_ino), mtime_ns(st)));
  OpenFiles::get().add(f.get(), fd);
  return f;
}

FileSource::~FileSource() { OpenFiles::get().remove(this); }

Status FileSource::read_at(std::uint64_t offset, std::span<std::uint8_t> out) const {
  const auto end = checked_add(offset, out.size());
  if (!end || *end > size_) {
    return Error(ErrorKind::kIoRead,
                 fmt::format("read of {} bytes past the end of a {}-byte file", out.size(), size_))
        .in_file(path_)
        .at_offset(offset);
  }
  QR_ASSIGN_OR_RETURN(fd, OpenFiles::get().acquire(this));
  std::size_t done = 0;
  Status status = ok_status();
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status =
          Error(ErrorKind::kIoRead, n == 0 ? std::string("file shrank while reading")
                                           : fmt::format("read failed: {}", std::strerror(errno)))
              .in_file(path_)
              .at_offset(offset + done);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  OpenFiles::get().release(this);
  return status;
}

Status MemorySource::read_at(std::uint64_t offset, std::span<std::uint8_t> out) const {
  const auto end = checked_add(offset, out.size());
  if (!end || *end > bytes_.size()) {
    return Error(ErrorKind::kIoRead, "read past the end").in_file(name_).at_offset(offset);
  }
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
  return ok_status();
}

}  // namespace qrepack

namespace qrepack {

Result<std::uint64_t> xxhash64_of(const ByteSource& source) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<std::uint8_t> buf(std::size_t{8} << 20);
  for (std::uint64_t off = 0; off < source.size(); off += buf.size()) {
    const auto n =
        static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), source.size() - off));
    auto st = source.read_at(off, std::span(buf.data(), n));
    if (!st.ok()) {
      XXH64_freeState(state);
      return std::move(st).error();
    }
    XXH64_update(state, buf.data(), n);
  }
  const std::uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

}  // namespace qrepack
