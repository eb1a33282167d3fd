// An append-only store of bytes that never move once written: the names and shapes of a
// safetensors header's entries live here, viewed by the entries (one allocation per block
// instead of two per tensor). Blocks grow from 1 KiB to 64 KiB, so a checkpoint of 10,000
// small shards holds 10,000 small arenas, not 10,000 x 64 KiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace qrepack {

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// A copy of `s` that lives as long as the arena.
  std::string_view copy(std::string_view s);
  /// a + b in one copy that lives as long as the arena.
  std::string_view copy_joined(std::string_view a, std::string_view b);
  /// A copy of `v` that lives as long as the arena.
  std::span<const std::uint64_t> copy(std::span<const std::uint64_t> v);
  /// Bytes held (blocks allocated), for tests and reports.
  std::size_t capacity() const { return held_; }

 private:
  void* allocate(std::size_t bytes, std::size_t align);
  static constexpr std::size_t kFirstBlock = 1024;
  static constexpr std::size_t kBlock = 64 * 1024;
  std::size_t next_block_ = kFirstBlock;
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
  std::byte* next_ = nullptr;
  std::size_t left_ = 0;
  std::size_t held_ = 0;
};

}  // namespace qrepack
