// Writes a checkpoint directory: tensors in plan order split greedily into shards under a size
// limit (a tensor larger than the limit gets a shard of its own), named as Hugging Face names
// them, plus model.safetensors.index.json when there is more than one shard. Every file goes
// to a sibling temp file; nothing becomes visible until finish() has made all of them durable,
// so a failed run leaves no checkpoint files behind.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/name_index.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors_writer.h"

namespace qrepack {

/// Hugging Face's default shard limit: 5 GB (decimal).
inline constexpr std::uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

struct ShardPlan {
  ShardPlan() = default;
  ShardPlan(ShardPlan&&) = default;
  ShardPlan& operator=(ShardPlan&&) = default;
  ShardPlan(const ShardPlan&) = delete;
  ShardPlan& operator=(const ShardPlan&) = delete;
  /// Every tensor in write order: views of `owned` (plan_shards), or the caller's
  /// (plan_shards_view). The layouts view contiguous runs of it (so a ShardPlan is move-only;
  /// moving it keeps the views valid).
  std::span<const TensorView> specs;
  std::vector<TensorSpec> owned;
  std::vector<TensorView> owned_views;
  std::vector<std::string> file_names;
  std::vector<SafetensorsLayout> layouts;
  /// Index into `specs` of each shard's first tensor.
  std::vector<std::size_t> first;
  std::uint64_t total_size = 0;  ///< sum of tensor bytes, as index metadata.total_size
  /// The shard holding specs[i].
  std::size_t shard_of(std::size_t i) const;
};

/// Cuts `tensors` (in order) into shards of at most max_shard_bytes (a larger tensor alone).
Result<ShardPlan> plan_shards(std::vector<TensorSpec> tensors, std::uint64_t max_shard_bytes,
                              const std::map<std::string, std::string>& metadata,
                              std::string_view prefix = {});
/// The same over tensors the caller keeps alive (and unmoved) as long as the plan, with what
/// they view.
Result<ShardPlan> plan_shards_view(std::span<const TensorView> tensors,
                                   std::uint64_t max_shard_bytes,
                                   const std::map<std::string, std::string>& metadata,
                                   std::string_view prefix = {});

Result<std::unique_ptr<AtomicFileSink>> prepare_index_file(
    const std::string& dir, std::uint64_t total_size,
    std::vector<std::pair<std::string_view, std::string_view>> names);

/// Replaces shard `s`'s __metadata__ with `metadata` (the layout is recomputed).
Status set_shard_metadata(ShardPlan& plan, std::size_t s,
                          const std::map<std::string, std::string>& metadata);

class CheckpointWriter {
 public:
  /// Refuses (kOutputExists) a directory that already holds safetensors files or an index;
  /// creates the directory when missing.
  static Result<std::unique_ptr<CheckpointWriter>> create(const std::string& dir, ShardPlan plan);

  const ShardPlan& plan() const { return plan_; }
  /// Next tensor in plan order (crossing into the next shard as needed).
  Status begin_tensor(std::string_view name);
  Status append(std::span<const std::uint8_t> bytes);
  Status write_tensor(std::string_view name, std::span<const std::uint8_t> bytes);
  /// Adds a prepared (durable, not yet visible) file that finish() publishes with the shards.
  void stage(std::unique_ptr<AtomicFileSink> file) { staged_.push_back(std::move(file)); }
  /// Completes every shard, writes the index, then renames all files into place (staged files
  /// first, the index last).
  Status finish();
  /// Paths of the files finish() made visible.
  const std::vector<std::string>& written_files() const { return written_; }

 private:
  CheckpointWriter(std::string dir, ShardPlan plan);
  Status open_shard(std::size_t i);
  Status finish_shards();
  Status close_current();
  std::string dir_;
  ShardPlan plan_;
  std::vector<std::unique_ptr<AtomicFileSink>> sinks_;
  AtomicFileSink* current_file_ = nullptr;
  std::unique_ptr<SafetensorsWriter> writer_;
  std::size_t opened_ = 0;  ///< shards opened so far
  std::size_t shard_ = 0;
  std::size_t in_shard_ = 0;  ///< tensors begun in the current shard
  std::vector<std::unique_ptr<AtomicFileSink>> staged_;
  std::vector<std::string> written_;
};

}  // namespace qrepack
