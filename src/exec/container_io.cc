#include "exec/container_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/sha256.h"
#include "core/version.h"
#include "io/json_file.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/io/side_files.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

Error io_error(ErrorKind kind, const std::string& path, std::string_view what) {
  return Error(kind, fmt::format("{}: {}", what, std::strerror(errno))).in_file(path);
}

// Closes its descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status write_new_file(const std::string& path, std::string_view bytes) {
  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (f.fd < 0) return io_error(ErrorKind::kIoWrite, path, "cannot create");
  QR_TRY(pwrite_all(
      f.fd, std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0, path));
  if (::fsync(f.fd) != 0) return io_error(ErrorKind::kIoWrite, path, "fsync");
  return ok_status();
}

}  // namespace

Status pwrite_all(int fd, std::span<const std::uint8_t> bytes, std::uint64_t offset,
                  const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(ErrorKind::kIoWrite, path, "write failed");
    bytes = bytes.subspan(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return ok_status();
}

// A remote file (hf://, https://) into `to`: a shard through its checked stream, a small file
// (no published SHA-256; its git blob id) read whole and checked, as a side file is.
Status copy_remote_bytes(const std::string& from, const std::string& to) {
  QR_ASSIGN_OR_RETURN(
      in, remote::published_sha256(from).ok() ? open_byte_source(from) : open_side_file(from));
  Fd out{::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (out.fd < 0) return io_error(ErrorKind::kIoWrite, to, "cannot create");
  std::vector<std::uint8_t> buf(std::size_t{4} << 20);
  for (std::uint64_t at = 0; at < in->size();) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), in->size() - at));
    QR_TRY(in->read_at(at, std::span(buf.data(), n)));
    QR_TRY(pwrite_all(out.fd, std::span(buf.data(), n), at, to));
    at += n;
  }
  if (::fsync(out.fd) != 0) return io_error(ErrorKind::kIoWrite, to, "fsync");
  return ok_status();
}

Status copy_file_bytes(const std::string& from, const std::string& to) {
  if (remote::is_remote_path(from)) return copy_remote_bytes(from, to);
  Fd in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return io_error(ErrorKind::kIoRead, from, "cannot open");
  Fd out{::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (out.fd < 0) return io_error(ErrorKind::kIoWrite, to, "cannot create");
  std::vector<std::uint8_t> buf(std::size_t{4} << 20);
  std::uint64_t at = 0;
  for (;;) {
    const ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(ErrorKind::kIoRead, from, "read failed");
    if (n == 0) break;
    QR_TRY(pwrite_all(out.fd, std::span(buf.data(), static_cast<std::size_t>(n)), at, to));
    at += static_cast<std::uint64_t>(n);
  }
  if (::fsync(out.fd) != 0) return io_error(ErrorKind::kIoWrite, to, "fsync");
  return ok_status();
}

Status stage_shards(const Checkpoint& ck, const ContainerPlan& plan, const std::string& out_dir,
                    ContainerReport& rep) {
  if (plan.staged_shards.empty()) return ok_status();
  std::vector<std::pair<std::string, std::string>> digests;
  for (const std::string& src : plan.staged_shards) {
    const std::string name = fs::path(src).filename().string();
    const std::string dst = (fs::path(out_dir) / name).string();
    QR_ASSIGN_OR_RETURN(
        want, remote::is_remote_path(src) ? remote::published_sha256(src) : sha256_file(src));
    if (remote::is_remote_path(src)) {
      QR_TRY(copy_remote_bytes(src, dst));  // checked against the published SHA-256 below
    } else if (::link(src.c_str(), dst.c_str()) == 0) {
      ++rep.hard_linked;
    } else if (errno == EXDEV || errno == EPERM || errno == EMLINK || errno == ENOTSUP ||
               errno == EACCES) {
      QR_TRY(copy_file_bytes(src, dst));  // another filesystem, or links refused: a copy
    } else {
      return io_error(ErrorKind::kIoWrite, dst, "cannot stage");
    }
    QR_ASSIGN_OR_RETURN(got, sha256_file(dst));
    if (got != want) {
      return Error(ErrorKind::kIoWrite,
                   fmt::format("staged shard's SHA-256 {} differs from the source's {}", got, want))
          .in_file(dst)
          .with_rule("stage.sha256");
    }
    std::error_code ec;
    rep.bytes_written += fs::file_size(dst, ec);
    rep.bytes_read += fs::file_size(dst, ec);  // the same bytes (checked); src may be remote
    ++rep.files;
    digests.emplace_back(name, got);
  }
  rep.tensors = ck.tensors().size();
  if (plan.staged_meta) {
    QR_TRY(write_new_file((fs::path(out_dir) / plan.staged_meta_name).string(),
                          plan.staged_meta(digests)));
  }
  return ok_status();
}

Status write_side_files(const ContainerPlan& plan, const std::string& out_dir) {
  for (const ContainerSideFile& f : plan.side_files) {
    const std::string dst = (fs::path(out_dir) / f.name).string();
    if (!f.link_to.empty()) {
      std::error_code ec;
      fs::create_symlink(f.link_to, dst, ec);
      if (ec) return io_error(ErrorKind::kIoWrite, dst, "cannot create the link to " + f.link_to);
    } else if (f.copy_from.empty()) {
      QR_TRY(write_new_file(dst, f.bytes));
    } else {
      QR_TRY(copy_file_bytes(f.copy_from, dst));
    }
  }
  return ok_status();
}

Status write_container_manifest(const Checkpoint& ck, const ContainerPlan& plan,
                                const nlohmann::json& parameters, const std::string& out_dir,
                                const ContainerReport& rep) {
  nlohmann::ordered_json m;
  m["qrepack_version"] = kVersion;
  m["target"] = {{"name", plan.target->name},
                 {"runtime", plan.target->runtime},
                 {"reference_tool", plan.target->tool}};
  m["parameters"] = parameters;
  m["source"] = {{"path", ck.directory()},
                 {"tensors", ck.tensors().size()},
                 {"bytes", ck.total_size()},
                 {"family", plan.family},
                 {"model_type", plan.model_type}};
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ContainerFile& f : plan.files) {
    files.push_back({{"name", f.name}, {"tensors", f.tensors.size()}});
  }
  for (const std::string& s : plan.staged_shards) {
    files.push_back({{"name", fs::path(s).filename().string()}, {"staged", true}});
  }
  for (const ContainerSideFile& f : plan.side_files) {
    if (f.link_to.empty()) {
      files.push_back({{"name", f.name}, {"side_file", true}});
    } else {
      files.push_back({{"name", f.name}, {"link", f.link_to}});
    }
  }
  return write_manifest_tail(m, std::move(files), rep.bytes_written, plan.sources, out_dir);
}

Status write_manifest_tail(nlohmann::ordered_json& m, nlohmann::ordered_json files,
                           std::uint64_t bytes_written, std::span<const ContainerSource> sources,
                           const std::string& out_dir) {
  m["files"] = std::move(files);
  m["bytes_written"] = bytes_written;
  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  for (const ContainerSource& s : sources) {
    records.push_back({{"name", s.name}, {"disposition", s.disposition}, {"rule", s.rule}});
  }
  m["sources"] = std::move(records);
  return write_json_file((fs::path(out_dir) / "qrepack.json").string(), m);
}

Status remove_finishing_files(const ContainerPlan& plan, const std::string& out_dir) {
  std::vector<std::string> names = {"qrepack.json"};
  for (const std::string& s : plan.staged_shards) names.push_back(fs::path(s).filename().string());
  if (!plan.staged_meta_name.empty()) names.push_back(plan.staged_meta_name);
  for (const ContainerSideFile& f : plan.side_files) names.push_back(f.name);
  for (const std::string& n : names) {
    const std::string path = (fs::path(out_dir) / n).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return io_error(ErrorKind::kIoWrite, path, "cannot replace");
    }
  }
  return ok_status();
}

}  // namespace qrepack
