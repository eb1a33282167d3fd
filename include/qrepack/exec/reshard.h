// Rewrites a checkpoint under a new shard limit, streaming every tensor through one reused
// buffer, then re-reads the output and checks each tensor's xxhash64 against the source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/name_pattern.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

struct ReshardOptions {
  std::uint64_t max_shard_bytes;
  std::optional<NamePattern> select;  ///< keep only tensors whose name matches (search)
  std::optional<NamePattern> drop;    ///< leave out tensors whose name matches (search)
  std::size_t buffer_bytes = std::size_t{16} << 20;
};

struct ReshardReport {
  std::size_t tensors = 0;
  std::size_t dropped = 0;  ///< not selected, or dropped by --drop
  std::uint64_t bytes = 0;
  std::vector<std::string> files;       ///< checkpoint files written
  std::vector<std::string> side_files;  ///< config/tokenizer files copied
  std::size_t verified = 0;             ///< tensors whose checksums matched after the write
};

Result<ReshardReport> reshard(const Checkpoint& source, const std::string& out_dir,
                              const ReshardOptions& options);

}  // namespace qrepack
