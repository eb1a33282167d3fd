// Output files that are not safetensors (the Gemma 4 runtime's layer-NN.g4ex packs), as a
// target describes them: a size and pieces at offsets the plan fixes, each literal bytes (a
// header) or a range copied unchanged from a source file, every byte no piece covers zero. A job
// is a few pieces one worker writes together (a header, an expert's record). The one executor
// runs them (exec/byte_files.h), so --resume, --shard I/N + merge, bounded descriptors and
// progress come with them; a target only describes its files.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/targets/container.h"

namespace qrepack {

/// `size` bytes at offset `at` of the file: `literal` when it is not empty (then its size),
/// else a copy of source `source`'s bytes from offset `from`.
struct BytePiece {
  std::uint64_t at = 0;
  std::uint64_t size = 0;
  std::vector<std::uint8_t> literal;
  std::uint32_t source = 0;
  std::uint64_t from = 0;
  bool is_copy() const { return literal.empty(); }
};

/// Pieces one worker writes together.
struct ByteJob {
  std::vector<BytePiece> pieces;
};

struct ByteFile {
  std::string name;  ///< in the output directory
  std::uint64_t size = 0;
  std::vector<ByteJob> jobs;
};

/// A whole run of byte files: what to write and what qrepack.json says about it.
struct ByteRunPlan {
  std::vector<ByteFile> files;
  /// Written after the byte files (not by a --shard worker), in this order: (name, bytes).
  std::vector<std::pair<std::string, std::string>> side_files;
  /// What happened to every source tensor (qrepack.json's "sources").
  std::vector<ContainerSource> sources;
  /// qrepack.json's head: version, target, parameters, source; files, bytes_written and
  /// sources are added after it.
  nlohmann::ordered_json manifest;
  /// The run's parameters as the state files record them (resume and merge compare them).
  nlohmann::json parameters;
};

/// Checks every piece before anything is read: not empty, inside its file, a literal of its
/// size or a copy inside its source (of `source_sizes[source]` bytes), and no two pieces of one
/// file overlapping (kInternal with the file's name: a planner's mistake, never the input's).
Status validate_byte_files(std::span<const ByteFile> files,
                           std::span<const std::uint64_t> source_sizes);

/// Feeds every file's name and size and every piece into `st`: what a run's plan fingerprint
/// needs of byte files (the sources' contents are the source stamp's business).
void hash_byte_files(XXH64_state_t* st, std::span<const ByteFile> files);

}  // namespace qrepack
