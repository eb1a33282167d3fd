#include "qrepack/io/byte_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "qrepack/core/checked.h"

namespace qrepack {

Result<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO or a device must not wait for a writer; only regular files are
  // read, so the flag changes nothing for what passes the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    return Error(err == ENOENT  ? ErrorKind::kInputNotFound
                 : err == ELOOP ? ErrorKind::kNotRegularFile
                                : ErrorKind::kIoOpen,
                 fmt::format("cannot open: {}", std::strerror(err)))
        .in_file(path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error(ErrorKind::kIoOpen, fmt::format("cannot stat: {}", std::strerror(err)))
        .in_file(path);
  }
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
  return std::unique_ptr<FileSource>(
      new FileSource(path, fd, static_cast<std::uint64_t>(st.st_size),
                     static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)));
}

FileSource::~FileSource() { ::close(fd_); }

Status FileSource::read_at(std::uint64_t offset, std::span<std::uint8_t> out) const {
  const auto end = checked_add(offset, out.size());
  if (!end || *end > size_) {
    return Error(ErrorKind::kIoRead,
                 fmt::format("read of {} bytes past the end of a {}-byte file", out.size(), size_))
        .in_file(path_)
        .at_offset(offset);
  }
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error(ErrorKind::kIoRead, n == 0
                                           ? std::string("file shrank while reading")
                                           : fmt::format("read failed: {}", std::strerror(errno)))
          .in_file(path_)
          .at_offset(offset + done);
    }
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
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
