// The xxhash64 of every output tensor of a conversion (the manifest's and the state files'),
// by position in the shard plan: computed by the job that wrote a tensor whole, else from its
// finished shard's bytes, or taken from an earlier run's record of a shard it reuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint_writer.h"

namespace qrepack {

class OutputHashes {
 public:
  explicit OutputHashes(const ShardPlan& plan)
      : plan_(plan), hashes_(plan.specs.size()), known_(plan.specs.size()) {}

  /// Records output i's hash (different i may be set from different threads at once).
  void set(std::size_t i, std::uint64_t hash) {
    hashes_[i] = hash;
    known_[i] = 1;
  }
  bool known(std::size_t i) const { return known_[i] != 0; }
  /// The hash of the plan's output i.
  Result<std::uint64_t> hash_of(std::size_t i) const {
    if (i >= hashes_.size() || !known_[i]) {
      return Error(ErrorKind::kInternal, "an output tensor was neither written nor reused")
          .in_tensor(i < hashes_.size() ? std::string(plan_.specs[i].name) : std::string());
    }
    return hashes_[i];
  }
  /// Tensor bytes written by this run.
  std::uint64_t written() const { return written_; }
  void add_written(std::uint64_t bytes) { written_ += bytes; }

 private:
  const ShardPlan& plan_;
  // By position in the plan: 9 bytes per output.
  std::vector<std::uint64_t> hashes_;
  std::vector<std::uint8_t> known_;  ///< bytes, not bits: set from several threads
  std::uint64_t written_ = 0;
};

}  // namespace qrepack
