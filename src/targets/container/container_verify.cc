// verify_copied_tensors: after a container is written, every tensor the plan copied is read
// back from the output file and compared with the source, byte for byte (colibri-kimi-k3's
// standard check, upstream k3_repack.py --verify-full: its MXFP4 experts are 93 % of the
// bytes and must arrive unchanged). Blocks of 8 MiB, one copied tensor per job.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "exec/container_io.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kBlock = std::uint64_t{8} << 20;

struct CopiedTensor {
  const ContainerUnit* unit;
  std::string path;
  std::uint64_t offset;  ///< of its data in the output file
};

Result<std::vector<CopiedTensor>> copied_tensors(const ContainerPlan& plan,
                                                 const std::string& out_dir) {
  std::vector<std::vector<std::uint64_t>> starts(plan.files.size());
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const ContainerFile& cf = plan.files[i];
    QR_ASSIGN_OR_RETURN(
        layout, cf.metadata_last.empty()
                    ? plan_safetensors(cf.tensors, cf.metadata)
                    : plan_safetensors_metadata_last(cf.tensors, cf.metadata_last, cf.data_align));
    std::uint64_t at = layout.header_size;
    for (const TensorSpec& t : cf.tensors) {
      starts[i].push_back(at);
      at += data_bytes(t.view());
    }
  }
  std::vector<CopiedTensor> out;
  for (const ContainerUnit& u : plan.units) {
    if (u.kind != UnitKind::kCopy) continue;
    out.push_back(
        {&u, (fs::path(out_dir) / plan.files[u.file].name).string(), starts[u.file][u.data]});
  }
  return out;
}

// a and b are reused from tensor to tensor, never zero-filled: both are overwritten by reads.
Status compare_one(const Checkpoint& ck, const CopiedTensor& c, RawVector<std::uint8_t>& a,
                   RawVector<std::uint8_t>& b) {
  const TensorRef& raw = c.unit->raw;
  const int fd = ::open(c.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error(ErrorKind::kIoRead, fmt::format("cannot reopen: {}", std::strerror(errno)))
        .in_file(c.path);
  }
  Status st = ok_status();
  const std::uint64_t n = raw.entry->byte_size();
  for (std::uint64_t at = 0; at < n && st.ok(); at += kBlock) {
    const std::uint64_t len = std::min(kBlock, n - at);
    a.resize(len);
    b.resize(len);
    st = ck.read(raw, at, a);
    if (!st.ok()) break;
    const ssize_t got = ::pread(fd, b.data(), len, static_cast<off_t>(c.offset + at));
    if (got != static_cast<ssize_t>(len) || std::memcmp(a.data(), b.data(), len) != 0) {
      st = Error(ErrorKind::kVerificationFailed,
                 fmt::format("bytes [{}, {}) read back differ from the source's", at, at + len))
               .in_file(c.path)
               .in_tensor(raw.entry->name)
               .with_rule("target.verify_copies");
    }
  }
  ::close(fd);
  return st;
}

}  // namespace

Status verify_copied_tensors(const Checkpoint& ck, const ContainerPlan& plan,
                             const std::string& out_dir) {
  QR_ASSIGN_OR_RETURN(copies, copied_tensors(plan, out_dir));
  std::mutex mu;
  std::optional<std::pair<std::size_t, Error>> first;
  parallel_for(copies.size(), 1, [&](std::size_t b, std::size_t e, std::size_t) {
    thread_local RawVector<std::uint8_t> x, y;
    for (std::size_t i = b; i < e; ++i) {
      Status st = compare_one(ck, copies[i], x, y);
      if (st.ok()) continue;
      std::lock_guard lock(mu);
      if (!first || first->first > i) first.emplace(i, st.error());
      return;
    }
  });
  if (first) return std::move(first->second);
  return ok_status();
}

}  // namespace qrepack
