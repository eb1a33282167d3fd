#include "cli/dry_run.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <optional>

#include "cli/format.h"
#include "exec/manifest.h"
#include "qrepack/core/dtype.h"
#include "remote/paths.h"

namespace qrepack::cli {
namespace {

namespace fs = std::filesystem;

// Free bytes on the filesystem OUT would be created on (its nearest existing ancestor).
std::optional<std::uint64_t> free_bytes_at(const std::string& out, std::string& where) {
  fs::path p = fs::absolute(fs::path(out)).lexically_normal();
  for (int up = 0; up < 4096 && !p.empty(); ++up) {
    struct statvfs st {};
    if (::statvfs(p.c_str(), &st) == 0) {
      where = p.string();
      return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
    }
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  return std::nullopt;
}

void print_footer(const Checkpoint& ck, std::uint64_t out_bytes, std::size_t tensors,
                  std::size_t files, const std::string& out) {
  fmt::print("dry run: would write {} tensors in {} file(s), {} ({} bytes), to {}\n", tensors,
             files, human_bytes(out_bytes), out_bytes, out);
  std::string where;
  const auto free = free_bytes_at(out, where);
  if (free) {
    fmt::print("disk: needs {} at {}, which has {} free{}\n", human_bytes(out_bytes), where,
               human_bytes(*free), *free < out_bytes ? " -- NOT ENOUGH" : "");
  }
  if (remote::is_remote_path(ck.directory())) {
    const remote::TransferTotals t = remote::transfer_totals();
    fmt::print(
        "source: {} in {} shard(s) at {}, streamed and never stored (headers so far: {} "
        "in {} requests)\n",
        human_bytes(ck.total_size()), ck.shards().size(), ck.directory(), human_bytes(t.bytes),
        t.requests);
  } else {
    fmt::print("source: {} in {} shard(s) at {}\n", human_bytes(ck.total_size()),
               ck.shards().size(), ck.directory());
  }
  fmt::print("nothing was written (--dry-run)\n");
}

}  // namespace

Status print_dry_run(const Checkpoint& ck, const ConvertPlan& plan, std::uint64_t max_shard_bytes,
                     const std::string& out) {
  QR_ASSIGN_OR_RETURN(shards, plan_output_shards(plan, max_shard_bytes, {}));
  std::uint64_t bytes = 0;
  for (const auto& l : shards.layouts) bytes += l.file_size();
  print_footer(ck, bytes, plan.outputs.size(), shards.file_names.size(), out);
  return ok_status();
}

Status print_dry_run(const Checkpoint& ck, const ContainerPlan& plan, const std::string& out) {
  std::uint64_t bytes = 0;
  std::size_t tensors = 0;
  for (const ContainerFile& f : plan.files) {
    for (const TensorSpec& t : f.tensors) {
      std::uint64_t numel = 1;
      for (const std::uint64_t d : t.shape) numel *= d;
      bytes += dtype_byte_size(t.dtype, numel).value_or(0);
      ++tensors;
    }
  }
  for (const ContainerSideFile& s : plan.side_files) bytes += s.bytes.size();
  print_footer(ck, bytes, tensors, plan.files.size() + plan.side_files.size(), out);
  return ok_status();
}

}  // namespace qrepack::cli
