// execute + commit for `convert`: streams every planned weight in row blocks through reused
// buffers (peak memory ~ one row block of f32 plus one weight's scales, independent of model
// size), encodes it, and writes shards, side files and the qrepack.json manifest atomically.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/plan/convert_plan.h"

namespace qrepack {

struct ConvertReport {
  std::size_t outputs = 0;
  std::size_t shards = 0;
  std::uint64_t bytes_read = 0;     ///< source tensor bytes read
  std::uint64_t bytes_written = 0;  ///< output tensor bytes
  double seconds = 0;
  std::size_t reused_shards = 0;  ///< --resume: shards kept from the earlier run
};

/// Row block size in bytes of f32 (the dominant buffer).
inline constexpr std::uint64_t kRowBlockBytes = std::uint64_t{8} << 20;

/// With `resume`, shards are published as they complete and recorded with their checksums in
/// OUT/.qrepack-progress.json; a rerun with `resume` reuses every recorded shard whose file
/// still has its checksum, and refuses (kParameterMismatch) an earlier run made with other
/// parameters or another source layout.
Result<ConvertReport> execute_conversion(const Checkpoint& ck, const ConvertPlan& plan,
                                         const ConvertOptions& o, const std::string& out_dir,
                                         const nlohmann::json& parameters, bool resume);

inline constexpr const char* kProgressFileName = ".qrepack-progress.json";

}  // namespace qrepack
