// A checkpoint on disk: one .safetensors file, or a Hugging Face directory of shards with
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {name: shard}}).
// Opening validates every shard's header and the index against the shards; tensor data is only
// read on request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/name_index.h"
#include "qrepack/io/safetensors.h"

namespace qrepack {

/// A tensor and the shard holding it.
struct TensorRef {
  std::size_t shard;
  const TensorEntry* entry;
};

/// A tensor that may be absent (a weight's optional sidecar), in the 16 bytes of a TensorRef:
/// absent when its entry is null (std::optional<TensorRef> takes 24).
class MaybeTensor {
 public:
  MaybeTensor() = default;
  MaybeTensor(std::nullopt_t) {}                // NOLINT
  MaybeTensor(const TensorRef& t) : ref_(t) {}  // NOLINT
  MaybeTensor(const std::optional<TensorRef>& t)
      : ref_(t.value_or(TensorRef{0, nullptr})) {}  // NOLINT
  bool has_value() const { return ref_.entry != nullptr; }
  explicit operator bool() const { return has_value(); }
  const TensorRef& operator*() const { return ref_; }
  const TensorRef* operator->() const { return &ref_; }

 private:
  TensorRef ref_{0, nullptr};
};

/// Every tensor of a checkpoint, shard by shard: references made from the shards' entries on
/// access (a checkpoint of 100k tensors holds no 16-byte reference per tensor). Valid while
/// the checkpoint lives and is not moved.
class CheckpointTensors {
 public:
  class Iterator {
   public:
    using value_type = TensorRef;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(std::span<const SafetensorsFile> shards, std::size_t s) : shards_(shards), s_(s) {
      skip_empty();
    }
    TensorRef operator*() const { return {s_, &shards_[s_].tensors()[k_]}; }
    Iterator& operator++() {
      ++k_;
      skip_empty();
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const Iterator& o) const { return s_ == o.s_ && k_ == o.k_; }

   private:
    void skip_empty() {
      while (s_ < shards_.size() && k_ == shards_[s_].tensors().size()) {
        ++s_;
        k_ = 0;
      }
    }
    std::span<const SafetensorsFile> shards_;
    std::size_t s_ = 0, k_ = 0;
  };

  CheckpointTensors(std::span<const SafetensorsFile> shards, std::span<const std::size_t> first,
                    std::size_t size)
      : shards_(shards), first_(first), size_(size) {}
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Tensor i (0 <= i < size()): a binary search over the shards' first positions.
  TensorRef operator[](std::size_t i) const;
  Iterator begin() const { return {shards_, 0}; }
  Iterator end() const { return {shards_, shards_.size()}; }

 private:
  std::span<const SafetensorsFile> shards_;
  std::span<const std::size_t> first_;  ///< position of each shard's first tensor
  std::size_t size_ = 0;
};

class Checkpoint {
 public:
  /// PATH is a .safetensors file, an index .json file, or a directory holding an index or
  /// .safetensors files (several files without an index are read as shards, names unique).
  static Result<Checkpoint> open(const std::string& path);
  /// As open(path), but of an indexed checkpoint only the shards holding a tensor whose name
  /// starts with `name_prefix` are opened (and checked against the index); the others need not
  /// exist. colibri-qwen36's --mtp-only reads the MTP head's shard of a checkpoint whose trunk
  /// was converted before, or never downloaded. Without an index every shard is opened.
  static Result<Checkpoint> open_holding(const std::string& path, std::string_view name_prefix);
  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  Checkpoint(const Checkpoint&) = delete;  // TensorRefs point into this object's shards
  Checkpoint& operator=(const Checkpoint&) = delete;

  /// Directory holding the shards (config.json and friends live here).
  const std::string& directory() const { return directory_; }
  /// The index file, when there is one.
  const std::optional<std::string>& index_path() const { return index_path_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// Every file the checkpoint was read from: the shards, then the index (what an output must
  /// never overwrite).
  std::vector<std::string> files() const;
  /// Every tensor, shard by shard in shard order, file order within a shard.
  CheckpointTensors tensors() const { return {shards_, shard_first_, tensor_count_}; }
  std::optional<TensorRef> find(std::string_view name) const;
  /// Position of `name` in tensors(), or nullopt.
  std::optional<std::size_t> index_of(std::string_view name) const;
  /// Positions in tensors() in name order.
  const std::vector<std::uint32_t>& by_name() const { return by_name_.order(); }
  /// Sum of tensor byte sizes (what index metadata.total_size records).
  std::uint64_t total_size() const { return total_size_; }
  /// Problems with metadata no loader reads (an index's metadata.total_size that disagrees
  /// with the tensors): reported by the commands, never a refusal.
  const std::vector<std::string>& warnings() const { return warnings_; }

  Status read(const TensorRef& t, std::uint64_t offset, std::span<std::uint8_t> out) const {
    return shards_[t.shard].read(*t.entry, offset, out);
  }

 private:
  Checkpoint() = default;
  Status index_tensors();
  std::string directory_;
  std::optional<std::string> index_path_;
  std::vector<SafetensorsFile> shards_;
  std::vector<std::size_t> shard_first_;  ///< position in tensors() of each shard's first
  std::size_t tensor_count_ = 0;
  /// Positions in tensors() in name order (the names are the shards' entries, stable once
  /// indexed): a binary search finds a name.
  NameIndex by_name_;
  std::uint64_t total_size_ = 0;
  std::vector<std::string> warnings_;
};

/// Name of shard i (0-based) of n, as Hugging Face names them: model-00001-of-00003.safetensors;
/// a single shard is model.safetensors.
std::string shard_file_name(std::size_t i, std::size_t n);

inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

/// Cap on model.safetensors.index.json's size.
inline constexpr std::uint64_t kMaxIndexBytes = 256ull << 20;

}  // namespace qrepack
