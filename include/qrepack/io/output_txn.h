// Atomic destinations. Every command that writes OUT (a directory or a file) first takes
// OutputLock on it: a sibling lock file held with flock(2), so two live runs on one OUT cannot
// collide, and a run that was killed (-9, power loss) is recognised by its lock being free.
// Under the lock, the temp files and directories dead runs left (named
// ".<name>.qrepack-tmp-<pid>-<n>", beside OUT or inside it) are removed. A directory OUT is
// built in a StagedDirectory beside it and renamed into place only when complete, so nothing
// appears at OUT before the run commits and a failed run leaves nothing behind.
#pragma once

#include <cstddef>
#include <string>

#include "qrepack/core/error.h"

namespace qrepack {

class OutputLock {
 public:
  /// Locks destination `path` (existing or not; its parent is created if missing): creates and
  /// flocks
  /// "<parent>/.<name>.qrepack-lock", holding this process's pid. kOutputBusy when another
  /// live process holds it. Then removes what dead runs left (remove_stale).
  static Result<OutputLock> acquire(const std::string& path);
  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&&) = delete;
  OutputLock(const OutputLock&) = delete;
  ~OutputLock();  ///< removes the lock file, then releases it

  /// Temp entries of dead runs removed when the lock was taken.
  std::size_t stale_removed() const { return stale_removed_; }

 private:
  OutputLock(std::string lock_path, int fd) : lock_path_(std::move(lock_path)), fd_(fd) {}
  std::string lock_path_;
  int fd_ = -1;
  std::size_t stale_removed_ = 0;
};

class StagedDirectory {
 public:
  /// A fresh, empty sibling of `out` to build it in. `out` must be absent or an empty
  /// directory (kOutputExists otherwise). Take OutputLock on `out` first.
  static Result<StagedDirectory> create(const std::string& out);
  StagedDirectory(StagedDirectory&& other) noexcept;
  StagedDirectory& operator=(StagedDirectory&&) = delete;
  StagedDirectory(const StagedDirectory&) = delete;
  ~StagedDirectory();  ///< removes the staged tree unless committed

  /// Where to write: the staged directory.
  const std::string& path() const { return staged_; }
  /// Makes the staged directory's entries durable, renames it to `out` (replacing an empty
  /// directory) and fsyncs the parent.
  Status commit();

 private:
  StagedDirectory(std::string out, std::string staged)
      : out_(std::move(out)), staged_(std::move(staged)) {}
  std::string out_;
  std::string staged_;
  bool committed_ = false;
};

/// Removes ".<name>.qrepack-tmp-*" entries in `dir` (every ".*.qrepack-tmp-*" when `name` is
/// empty); returns how many. Only for a caller holding the lock that guards them.
std::size_t remove_stale_temps(const std::string& dir, const std::string& name);

/// `path` without trailing slashes ("out/" and "out" name one destination).
std::string normalize_output_path(const std::string& path);

/// The temp name of `name` in a directory: ".<name>.qrepack-tmp-<pid>-<n>", unique in this
/// process. Every temp file and directory qrepack makes is named so.
std::string temp_name_for(const std::string& name);

}  // namespace qrepack
