// Small JSON files qrepack writes and reads back itself (--resume progress, --shard parts):
// read strictly, written atomically.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "qrepack/core/error.h"

namespace qrepack {

/// The whole file at `path` (at most `max_bytes`, else kLimitExceeded), parsed by
/// parse_json_strict; syntax errors get `syntax_kind` and every error names the file.
Result<nlohmann::json> read_json_file(const std::string& path, ErrorKind syntax_kind,
                                      std::uint64_t max_bytes);

/// `j.dump(1)` and a newline, written to `path` atomically (temp file, fsync, rename).
Status write_json_file(const std::string& path, const nlohmann::ordered_json& j);

}  // namespace qrepack
