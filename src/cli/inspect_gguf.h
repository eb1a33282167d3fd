// `qrepack inspect FILE.gguf`: the GGUF's tensors and a summary of its metadata.
#pragma once

#include <optional>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/core/name_pattern.h"

namespace qrepack::cli {

/// Lists the tensors (name, ggml type, dims as stored, bytes, offset) of the GGUF `path` names
/// (a file or a directory holding one), then per-type totals and the metadata keys.
Status run_inspect_gguf(const std::string& path, bool json,
                        const std::optional<NamePattern>& filter);

}  // namespace qrepack::cli
