// --resume over a finished GLM-layout output: what of it can stay.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/hashing_output.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint_writer.h"

namespace qrepack {

/// For a finished output in `out_dir` (its manifest made with this run's parameters): true when
/// every planned shard is there at its planned size, and the index when there are several:
/// nothing to do. Otherwise each shard there at its planned size whose tensors still hash to
/// the manifest's records is kept (write[s] cleared, `reused` counted, its tensor hashes set in
/// `hashes`, its record added to `progress`), and false is returned: the others are written
/// again, then the manifest, index and side files.
Result<bool> keep_finished_shards(const std::string& out_dir, const ShardPlan& shards,
                                  OutputHashes& hashes, std::vector<bool>& write,
                                  nlohmann::ordered_json& progress, std::size_t& reused);

}  // namespace qrepack
