// verify_copied_tensors: after a container is written, every tensor the plan copied is read
// back from the output file and checked against what was read from the source (colibri-kimi-
// k3's standard check, upstream k3_repack.py --verify-full: its MXFP4 experts are 93 % of the
// bytes and must arrive unchanged). A piece this run's job copied is checked against the
// digest of the bytes the job read, so the source is not read twice; a tensor of a file an
// earlier run wrote (--resume, merge) is compared with the source re-read, byte for byte, in
// blocks of 8 MiB. One copied tensor per job.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

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

Error differs(const CopiedTensor& c, std::uint64_t at, std::uint64_t len) {
  return Error(ErrorKind::kVerificationFailed,
               fmt::format("bytes [{}, {}) read back differ from the source's", at, at + len))
      .in_file(c.path)
      .in_tensor(c.unit->raw.entry->name)
      .with_rule("target.verify_copies");
}

// Pieces of `block` bytes read back from the output, each checked by `same(at, bytes)`. `b` is
// reused from tensor to tensor, never zero-filled: reads overwrite it.
template <class Same>
Status read_back(const CopiedTensor& c, std::uint64_t block, RawVector<std::uint8_t>& b,
                 Same&& same) {
  const int fd = ::open(c.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error(ErrorKind::kIoRead, fmt::format("cannot reopen: {}", std::strerror(errno)))
        .in_file(c.path);
  }
  Status st = ok_status();
  const std::uint64_t n = c.unit->raw.entry->byte_size();
  for (std::uint64_t at = 0; at < n && st.ok(); at += block) {
    const std::uint64_t len = std::min(block, n - at);
    b.resize(len);
    const ssize_t got = ::pread(fd, b.data(), len, static_cast<off_t>(c.offset + at));
    if (got != static_cast<ssize_t>(len)) {
      st = differs(c, at, len);
      break;
    }
    st = same(at, std::span<const std::uint8_t>(b.data(), len));
  }
  ::close(fd);
  return st;
}

// Against the digests of what this run's jobs read: the output is the only thing read.
Status check_digests(const CopiedTensor& c, const CopyDigests& d,
                     const std::vector<std::uint64_t>& digests, RawVector<std::uint8_t>& b) {
  return read_back(c, d.chunk, b,
                   [&](std::uint64_t at, std::span<const std::uint8_t> out) -> Status {
                     if (XXH3_64bits(out.data(), out.size()) == digests[at / d.chunk])
                       return ok_status();
                     return differs(c, at, out.size());
                   });
}

// Against the source, re-read (a tensor an earlier run wrote). `a` as `b` in read_back.
Status compare_with_source(const Checkpoint& ck, const CopiedTensor& c, RawVector<std::uint8_t>& a,
                           RawVector<std::uint8_t>& b) {
  return read_back(c, kBlock, b,
                   [&](std::uint64_t at, std::span<const std::uint8_t> out) -> Status {
                     a.resize(out.size());
                     QR_TRY(ck.read(c.unit->raw, at, a));
                     if (std::memcmp(a.data(), out.data(), out.size()) == 0) return ok_status();
                     return differs(c, at, out.size());
                   });
}

}  // namespace

Status verify_copied_tensors(const Checkpoint& ck, const ContainerPlan& plan,
                             const std::string& out_dir, const CopyDigests& digests) {
  QR_ASSIGN_OR_RETURN(copies, copied_tensors(plan, out_dir));
  std::mutex mu;
  std::optional<std::pair<std::size_t, Error>> first;
  parallel_for(copies.size(), 1, [&](std::size_t b, std::size_t e, std::size_t) {
    thread_local RawVector<std::uint8_t> x, y;
    for (std::size_t i = b; i < e; ++i) {
      const std::size_t u = static_cast<std::size_t>(copies[i].unit - plan.units.data());
      const bool recorded = u < digests.of_unit.size() && !digests.of_unit[u].empty();
      Status st = recorded ? check_digests(copies[i], digests, digests.of_unit[u], y)
                           : compare_with_source(ck, copies[i], x, y);
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
