// Positions of named items in name order: a lookup is a binary search, an item costs four
// bytes, and the names stay where they are (a caller's accessor reads them). Used by the
// safetensors header, the checkpoint, the checkpoint writer and the layout planner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace qrepack {

class NameIndex {
 public:
  NameIndex() = default;

  /// Orders positions [0, count) by name_of(i) (a std::string_view); equal names keep their
  /// order, so a repeat's first position comes first. count must fit 32 bits.
  template <class NameOf>
  static NameIndex build(std::size_t count, NameOf name_of) {
    NameIndex index;
    index.order_.resize(count);
    for (std::size_t i = 0; i < count; ++i) index.order_[i] = static_cast<std::uint32_t>(i);
    std::stable_sort(index.order_.begin(), index.order_.end(),
                     [&](std::uint32_t a, std::uint32_t b) {
                       return std::string_view(name_of(a)) < std::string_view(name_of(b));
                     });
    return index;
  }

  /// The position named `name` (the first, when repeated), or nullopt.
  template <class NameOf>
  std::optional<std::size_t> find(std::string_view name, NameOf name_of) const {
    const auto it = std::lower_bound(
        order_.begin(), order_.end(), name,
        [&](std::uint32_t i, std::string_view n) { return std::string_view(name_of(i)) < n; });
    if (it == order_.end() || std::string_view(name_of(*it)) != name) return std::nullopt;
    return *it;
  }

  /// The first name (in name order) held twice: its first and second positions.
  template <class NameOf>
  std::optional<std::pair<std::size_t, std::size_t>> first_repeat(NameOf name_of) const {
    for (std::size_t k = 1; k < order_.size(); ++k) {
      if (std::string_view(name_of(order_[k])) == std::string_view(name_of(order_[k - 1]))) {
        return std::pair<std::size_t, std::size_t>{order_[k - 1], order_[k]};
      }
    }
    return std::nullopt;
  }

  /// Every position, in name order.
  const std::vector<std::uint32_t>& order() const { return order_; }

 private:
  std::vector<std::uint32_t> order_;
};

}  // namespace qrepack
