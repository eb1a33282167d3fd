// The tensor stream of a conversion: appends to the checkpoint writer while hashing each
// output tensor (the manifest's and the progress file's xxhash64), and records the hashes of
// tensors skipped because an earlier run already wrote them. Names are views: they must outlive
// the HashingOutput (they are the plan's output names, or an earlier run's recorded ones).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "qrepack/io/checkpoint_writer.h"

namespace qrepack {

class HashingOutput {
 public:
  explicit HashingOutput(CheckpointWriter& w) : w_(w), state_(XXH64_createState()) {}
  ~HashingOutput() { XXH64_freeState(state_); }
  HashingOutput(const HashingOutput&) = delete;
  HashingOutput& operator=(const HashingOutput&) = delete;

  Status begin(std::string_view name) {
    QR_TRY(finish_current());
    current_ = name;
    XXH64_reset(state_, 0);
    return w_.begin_tensor(std::string(name));
  }
  Status append(std::span<const std::uint8_t> b) {
    XXH64_update(state_, b.data(), b.size());
    written_ += b.size();
    return w_.append(b);
  }
  Status skip(std::string_view name, std::uint64_t hash) {
    QR_TRY(finish_current());
    hashes_[name] = hash;
    return w_.skip_tensor(std::string(name));
  }
  void set_hash(std::string_view name, std::uint64_t hash) { hashes_[name] = hash; }
  Status finish_current() {
    if (!current_.empty()) hashes_[current_] = XXH64_digest(state_);
    current_ = {};
    return ok_status();
  }
  const std::unordered_map<std::string_view, std::uint64_t>& hashes() const { return hashes_; }
  std::uint64_t written() const { return written_; }

 private:
  CheckpointWriter& w_;
  XXH64_state_t* state_;
  std::string_view current_;
  std::unordered_map<std::string_view, std::uint64_t> hashes_;
  std::uint64_t written_ = 0;
};

}  // namespace qrepack
