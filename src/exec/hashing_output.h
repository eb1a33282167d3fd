// The tensor stream of a conversion: appends to the checkpoint writer while hashing each
// output tensor (the manifest's and the progress file's xxhash64), and records the hashes of
// tensors skipped because an earlier run already wrote them, by position in the writer's plan.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/io/checkpoint_writer.h"

namespace qrepack {

class HashingOutput {
 public:
  explicit HashingOutput(CheckpointWriter& w)
      : w_(w),
        state_(XXH64_createState()),
        hashes_(w.plan().specs.size()),
        known_(w.plan().specs.size()) {}
  ~HashingOutput() { XXH64_freeState(state_); }
  HashingOutput(const HashingOutput&) = delete;
  HashingOutput& operator=(const HashingOutput&) = delete;

  Status begin(std::string_view name) {
    QR_TRY(finish_current());
    XXH64_reset(state_, 0);
    QR_TRY(w_.begin_tensor(name));
    current_ = w_.current_index();
    return ok_status();
  }
  Status append(std::span<const std::uint8_t> b) {
    XXH64_update(state_, b.data(), b.size());
    written_ += b.size();
    return w_.append(b);
  }
  Status skip(std::string_view name, std::uint64_t hash) {
    QR_TRY(finish_current());
    QR_TRY(w_.skip_tensor(name));
    record(w_.current_index(), hash);
    return ok_status();
  }
  /// Records an earlier run's hash of output `name` (ignored for a name not in the plan).
  void set_hash(std::string_view name, std::uint64_t hash) {
    if (const auto i = w_.index_of(name)) record(*i, hash);
  }
  Status finish_current() {
    if (current_) record(*current_, XXH64_digest(state_));
    current_.reset();
    return ok_status();
  }
  /// The hash of the writer plan's output i (written, skipped or recorded).
  Result<std::uint64_t> hash_of(std::size_t i) const {
    if (i >= hashes_.size() || !known_[i]) {
      return Error(ErrorKind::kInternal, "an output tensor was neither written nor skipped")
          .in_tensor(i < hashes_.size() ? w_.plan().specs[i].name : std::string());
    }
    return hashes_[i];
  }
  std::uint64_t written() const { return written_; }

 private:
  CheckpointWriter& w_;
  XXH64_state_t* state_;
  std::optional<std::size_t> current_;
  void record(std::size_t i, std::uint64_t hash) {
    hashes_[i] = hash;
    known_[i] = true;
  }
  // By position in the writer's plan: 8 bytes and a bit per output.
  std::vector<std::uint64_t> hashes_;
  std::vector<bool> known_;
  std::uint64_t written_ = 0;
};

}  // namespace qrepack
