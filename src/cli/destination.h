// Where a command writes its output directory: under OutputLock on OUT, either straight into
// OUT (resumable runs, which publish as they go) or into a StagedDirectory beside it that
// commit() renames into place, so a failed or killed run leaves nothing at OUT.
#pragma once

#include <optional>
#include <string>

#include "qrepack/io/output_txn.h"

namespace qrepack::cli {

class Destination {
 public:
  /// Locks `out` and, unless `in_place`, stages it (OUT must be absent or empty).
  static Result<Destination> open(const std::string& out, bool in_place);
  /// Locks `lock_target` only and writes into `out` in place (a --shard worker locks its
  /// part file, since the workers share OUT).
  static Result<Destination> open_shared(const std::string& out, const std::string& lock_target);

  const std::string& write_dir() const { return staged_ ? staged_->path() : out_; }
  Status commit() { return staged_ ? staged_->commit() : ok_status(); }

 private:
  Destination(std::string out, OutputLock lock, std::optional<StagedDirectory> staged)
      : out_(std::move(out)), lock_(std::move(lock)), staged_(std::move(staged)) {}
  std::string out_;
  OutputLock lock_;
  std::optional<StagedDirectory> staged_;
};

inline Result<Destination> Destination::open(const std::string& out, bool in_place) {
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(out));
  if (in_place) return Destination(out, std::move(lock), std::nullopt);
  QR_ASSIGN_OR_RETURN(staged, StagedDirectory::create(out));
  return Destination(out, std::move(lock), std::move(staged));
}

inline Result<Destination> Destination::open_shared(const std::string& out,
                                                    const std::string& lock_target) {
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(lock_target));
  return Destination(out, std::move(lock), std::nullopt);
}

}  // namespace qrepack::cli
