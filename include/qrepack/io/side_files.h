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
#include "qrepack/io/byte_source.h"

namespace qrepack {

/// File names copied when present.
std::span<const std::string_view> side_file_names();

/// A side file as a source: a local file, or a remote one read whole and checked against what
/// the server publishes for it before it is returned (it may be published before any stream
/// is checked).
Result<std::shared_ptr<const ByteSource>> open_side_file(const std::string& path);

/// Copies every side file present in `src_dir` into temp files in `out_dir`, made durable but
/// not yet visible: the caller publishes them together with the checkpoint.
Result<std::vector<std::unique_ptr<AtomicFileSink>>> stage_side_files(const std::string& src_dir,
                                                                      const std::string& out_dir);

}  // namespace qrepack
