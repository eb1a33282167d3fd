// The options of `qrepack convert`, shared with `qrepack merge` (which finishes a sharded run
// by rerunning the conversion in resume mode with the options the parts recorded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/exec/convert.h"

namespace qrepack::cli {

struct ConvertCli {
  std::string source, out, to, bits, select, drop;  ///< to: empty = the pass's default
  bool mtp = false, indexer = false;                ///< --mtp, --indexer passes
  std::string max_shard_size, job_size;             ///< empty: the defaults (5GB, 8MiB)
  bool keep_unknown = false, keep_mtp = false, keep_indexer = false, unfuse = false;
  bool no_coverage = false;
  bool resume = false;
  std::string shard;  ///< "I/N"
  // e0m3-sfb only
  std::string fold;
  std::optional<std::int64_t> expected_records;
  bool keep_fp16 = false;
  std::string format;
  bool progress = false;
  std::size_t threads = 0;
};

Status run_convert(const ConvertCli& c);

/// "I/N" with 0 <= I < N (N >= 1).
Result<ShardTask> parse_shard_task(const std::string& text);

}  // namespace qrepack::cli
