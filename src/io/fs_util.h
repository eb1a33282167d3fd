// Filesystem queries that never throw: every path here may come from a user or a file (a
// shard name in an index, a symlink loop where config.json should be, a FIFO), so failures are
// values. std::filesystem's throwing overloads are not used anywhere in qrepack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

enum class PathKind {
  kMissing,    ///< nothing there (ENOENT, or a dangling symlink)
  kRegular,    ///< a regular file (after following symlinks)
  kDirectory,  ///< a directory (after following symlinks)
  kOther,      ///< a FIFO, socket, device, a symlink loop, or a path stat cannot resolve
};

/// What `path` names, following symlinks; never blocks and never throws.
PathKind path_kind(const std::string& path);

/// The names in directory `dir` (no "." or ".."), sorted. kIoOpen when it cannot be read,
/// kLimitExceeded past kMaxDirectoryEntries.
Result<std::vector<std::string>> list_directory(const std::string& dir);

/// The whole regular file at `path` as text, refused with `over_cap` (and rule
/// "file.max_bytes") when it is larger than `cap`. Opened as FileSource does: a FIFO never
/// blocks, a non-regular file is kNotRegularFile.
Result<std::string> read_small_file(const std::string& path, std::uint64_t cap,
                                    ErrorKind over_cap = ErrorKind::kLimitExceeded);

/// Removes a file or a directory tree that qrepack created (iteratively, no recursion);
/// best effort, for clean-up paths.
void remove_tree(const std::string& path);

/// Cap on the entries of a directory qrepack lists (a checkpoint or output directory).
inline constexpr std::size_t kMaxDirectoryEntries = 1'000'000;

}  // namespace qrepack
