// Output-path safety, checked before any input byte is read: an output must never be one of
// the inputs, under any name (symlinks and hard links included).
#pragma once

#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

/// Error kOutputIsInput when `output` (a file, existing or not) resolves to, or is the same
/// inode as, any of `inputs`.
Status ensure_output_file_is_not_input(const std::string& output,
                                       const std::vector<std::string>& inputs);

/// Error kOutputIsInput when the output directory is the directory holding any of `inputs`
/// (writing shards there would replace them).
Status ensure_output_dir_is_not_input_dir(const std::string& output_dir,
                                          const std::vector<std::string>& inputs);

}  // namespace qrepack
