// Byte files as a target describes them (targets/container/byte_layout.h): their checks and
// their part of a run's fingerprint.
#include "targets/container/byte_layout.h"

#include <fmt/format.h>

#include <algorithm>

namespace qrepack {
namespace {

Error plan_error(const ByteFile& f, std::string message) {
  return Error(ErrorKind::kInternal, std::move(message)).in_file(f.name).with_rule("byte_files");
}

}  // namespace

Status validate_byte_files(std::span<const ByteFile> files,
                           std::span<const std::uint64_t> source_sizes) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // (at, end) of one file's pieces
  for (const ByteFile& f : files) {
    spans.clear();
    for (const ByteJob& j : f.jobs) {
      for (const BytePiece& p : j.pieces) {
        const bool literal_ok = p.is_copy() || p.literal.size() == p.size;
        if (p.size == 0 || p.at > f.size || p.size > f.size - p.at || !literal_ok) {
          return plan_error(f, fmt::format("a piece of {} bytes at {} does not fit the file's {}",
                                           p.size, p.at, f.size));
        }
        if (p.is_copy() && (p.source >= source_sizes.size() || p.from > source_sizes[p.source] ||
                            p.size > source_sizes[p.source] - p.from)) {
          return plan_error(
              f, fmt::format("a copy of {} bytes from {} lies outside its source", p.size, p.from));
        }
        spans.emplace_back(p.at, p.at + p.size);
      }
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) {
        return plan_error(f, fmt::format("two pieces overlap at byte {}", spans[i].first));
      }
    }
  }
  return ok_status();
}

void hash_byte_files(XXH64_state_t* st, std::span<const ByteFile> files) {
  for (const ByteFile& f : files) {
    const std::string head = fmt::format("{}|{}|{}", f.name, f.size, f.jobs.size());
    XXH64_update(st, head.data(), head.size() + 1);
    for (const ByteJob& j : f.jobs) {
      for (const BytePiece& p : j.pieces) {
        const std::string line = p.is_copy()
                                     ? fmt::format("c{}|{}|{}|{}", p.at, p.size, p.source, p.from)
                                     : fmt::format("l{}|{}", p.at, p.size);
        XXH64_update(st, line.data(), line.size() + 1);
        if (!p.is_copy()) XXH64_update(st, p.literal.data(), p.literal.size());
      }
    }
  }
}

}  // namespace qrepack
