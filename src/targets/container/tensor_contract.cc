#include "targets/container/tensor_contract.h"

#include <fmt/format.h>

#include <algorithm>

namespace qrepack {

std::optional<std::uint64_t> name_index(std::string_view s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos ||
      (s.size() > 1 && s[0] == '0')) {
    return std::nullopt;
  }
  std::uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<std::uint64_t>(c - '0');
  return v;
}

std::optional<std::pair<std::uint64_t, std::string_view>> split_index(std::string_view name,
                                                                      std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto i = name_index(name.substr(0, dot));
  if (!i) return std::nullopt;
  return std::pair{*i, name.substr(dot + 1)};
}

std::optional<std::vector<std::uint64_t>> match_indices(std::string_view pattern,
                                                        std::string_view name) {
  std::vector<std::uint64_t> out;
  for (;;) {
    const std::size_t hole = pattern.find("{}");
    const std::string_view literal = pattern.substr(0, hole);
    if (!name.starts_with(literal)) return std::nullopt;
    name.remove_prefix(literal.size());
    if (hole == std::string_view::npos) {
      if (!name.empty()) return std::nullopt;
      return out;
    }
    pattern.remove_prefix(hole + 2);
    // The index runs to the pattern's next literal character (or the end).
    const std::size_t end = pattern.empty() ? name.size() : name.find(pattern.front());
    const auto index = name_index(name.substr(0, end));
    if (!index) return std::nullopt;
    out.push_back(*index);
    name.remove_prefix(end == std::string_view::npos ? name.size() : end);
  }
}

void TensorContract::per_layer(std::uint64_t layers, std::string_view prefix,
                               std::initializer_list<Row> rows) {
  for (std::uint64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format(fmt::runtime(prefix), l);
    for (const Row& r : rows) add(p + std::string(r.suffix), r.shape);
  }
}

void TensorContract::mark_present(std::string_view name) {
  const auto it = want_.find(name);
  if (it != want_.end()) seen_.insert(it->first);
}

bool TensorContract::check(std::string_view name, std::span<const std::uint64_t> shape,
                           std::vector<std::string>& problems) {
  const auto it = want_.find(name);
  if (it == want_.end()) {
    problems.emplace_back(name);
    return false;
  }
  seen_.insert(it->first);  // present: a wrong shape is its problem, not a missing tensor
  if (!std::equal(shape.begin(), shape.end(), it->second.begin(), it->second.end())) {
    problems.push_back(fmt::format("{}: shape [{}], config implies [{}]", name,
                                   fmt::join(shape, ", "), fmt::join(it->second, ", ")));
    return false;
  }
  return true;
}

std::vector<std::string> TensorContract::missing() const {
  std::vector<std::string> out;
  for (const auto& [name, shape] : want_) {
    if (!seen_.contains(name)) out.push_back(name);
  }
  return out;
}

void TensorContract::report_missing(std::vector<std::string>& problems) const {
  for (const std::string& name : missing()) problems.push_back("missing " + name);
}

}  // namespace qrepack
