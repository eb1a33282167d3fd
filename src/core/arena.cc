#include "qrepack/core/arena.h"

#include <algorithm>
#include <cstring>

namespace qrepack {

void* Arena::allocate(std::size_t bytes, std::size_t align) {
  // new[] storage is aligned for any fundamental type: a fresh block needs no padding.
  std::size_t pad = next_ ? (align - reinterpret_cast<std::uintptr_t>(next_) % align) % align : 0;
  if (next_ == nullptr || pad + bytes > left_) {
    if (bytes > next_block_) {  // a block of its own; the current one stays open
      blocks_.push_back(std::make_unique<std::byte[]>(bytes));
      held_ += bytes;
      return blocks_.back().get();
    }
    blocks_.push_back(std::make_unique<std::byte[]>(next_block_));
    held_ += next_block_;
    next_ = blocks_.back().get();
    left_ = next_block_;
    next_block_ = std::min(2 * next_block_, kBlock);
    pad = 0;
  }
  std::byte* out = next_ + pad;
  next_ = out + bytes;
  left_ -= pad + bytes;
  return out;
}

std::string_view Arena::copy(std::string_view s) {
  if (s.empty()) return {};
  char* p = static_cast<char*>(allocate(s.size(), 1));
  std::memcpy(p, s.data(), s.size());
  return {p, s.size()};
}

std::string_view Arena::copy_joined(std::string_view a, std::string_view b) {
  if (a.size() + b.size() == 0) return {};
  char* p = static_cast<char*>(allocate(a.size() + b.size(), 1));
  std::memcpy(p, a.data(), a.size());
  std::memcpy(p + a.size(), b.data(), b.size());
  return {p, a.size() + b.size()};
}

std::span<const std::uint64_t> Arena::copy(std::span<const std::uint64_t> v) {
  if (v.empty()) return {};
  auto* p = static_cast<std::uint64_t*>(allocate(v.size_bytes(), alignof(std::uint64_t)));
  std::memcpy(p, v.data(), v.size_bytes());
  return {p, v.size()};
}

}  // namespace qrepack
