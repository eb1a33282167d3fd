#include "io/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

#include "qrepack/io/byte_source.h"
#include "remote/paths.h"

namespace qrepack {

namespace {

PathKind remote_path_kind(const std::string& path) {
  const auto loc = remote::locate(path);
  if (!loc) return PathKind::kMissing;
  if (loc->name.empty()) return PathKind::kDirectory;
  auto info = loc->repo->file(loc->name);
  if (!info.ok()) return PathKind::kOther;  // opening it names the failure
  return *info ? PathKind::kRegular : PathKind::kMissing;
}

}  // namespace

PathKind path_kind(const std::string& path) {
  if (remote::is_remote_path(path)) return remote_path_kind(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? PathKind::kMissing : PathKind::kOther;
  if (S_ISREG(st.st_mode)) return PathKind::kRegular;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  return PathKind::kOther;
}

Result<std::vector<std::string>> list_directory(const std::string& dir) {
  if (remote::is_remote_path(dir)) {
    const auto loc = remote::locate(dir);
    if (!loc || !loc->name.empty()) {
      return Error(ErrorKind::kIoOpen, "not an opened remote directory").in_file(dir);
    }
    return loc->repo->list();
  }
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    return Error(ErrorKind::kIoOpen, fmt::format("cannot list directory: {}", std::strerror(errno)))
        .in_file(dir);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    if (names.size() >= kMaxDirectoryEntries) {
      ::closedir(d);
      return Error(ErrorKind::kLimitExceeded,
                   fmt::format("more than {} directory entries", kMaxDirectoryEntries))
          .in_file(dir)
          .with_rule("directory.max_entries");
    }
    names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> read_small_file(const std::string& path, std::uint64_t cap,
                                    ErrorKind over_cap) {
  if (remote::is_remote_path(path)) {
    const auto loc = remote::locate(path);
    if (!loc || loc->name.empty()) {
      return Error(ErrorKind::kInputNotFound, "no such remote file").in_file(path);
    }
    auto text = loc->repo->read_small(loc->name, cap);
    if (!text.ok() && text.error().rule() == "file.max_bytes") {
      return Error(over_cap, text.error().message()).in_file(path).with_rule("file.max_bytes");
    }
    return text;
  }
  QR_ASSIGN_OR_RETURN(src, FileSource::open(path));
  if (src->size() > cap) {
    return Error(over_cap, fmt::format("{} bytes, over the cap of {}", src->size(), cap))
        .in_file(path)
        .with_rule("file.max_bytes");
  }
  std::string text(src->size(), '\0');
  QR_TRY(src->read_at(0, std::span(reinterpret_cast<std::uint8_t*>(text.data()), text.size())));
  return text;
}

void remove_tree(const std::string& path) {
  // Depth-first with an explicit list: directories are removed after their contents.
  std::vector<std::pair<std::string, bool>> todo{{path, false}};
  while (!todo.empty()) {
    auto [p, expanded] = todo.back();
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      todo.pop_back();
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      ::unlink(p.c_str());
      todo.pop_back();
      continue;
    }
    if (expanded) {
      ::rmdir(p.c_str());
      todo.pop_back();
      continue;
    }
    todo.back().second = true;
    auto names = list_directory(p);
    if (!names.ok()) continue;
    for (const std::string& n : *names) todo.emplace_back(p + "/" + n, false);
  }
}

}  // namespace qrepack
