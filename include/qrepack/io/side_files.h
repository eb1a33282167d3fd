// The non-tensor files of a Hugging Face checkpoint directory that an output checkpoint
// carries along unchanged (config, tokenizer, generation settings).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack {

/// File names copied when present.
std::span<const std::string_view> side_file_names();

/// Copies every side file present in `src_dir` into temp files in `out_dir`, made durable but
/// not yet visible: the caller publishes them together with the checkpoint.
Result<std::vector<std::unique_ptr<AtomicFileSink>>> stage_side_files(const std::string& src_dir,
                                                                      const std::string& out_dir);

}  // namespace qrepack
