// What a runtime reads, as data: every tensor name with the shape its config implies (whole-
// model rows and per-layer rows), and the check of a checkpoint's tensors against it: unknown,
// misshapen and missing names, each problem one line for unknown_tensors_error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qrepack {

/// A layer or expert index as a tensor name spells it: 1-9 decimal digits, no leading zero (so
/// "02" and "2" cannot name one tensor twice).
std::optional<std::uint64_t> name_index(std::string_view s);

/// "PREFIX<i>.<rest>" -> (i, rest), i a name_index; nothing when the name has another form.
std::optional<std::pair<std::uint64_t, std::string_view>> split_index(std::string_view name,
                                                                      std::string_view prefix);

/// `name` against `pattern`, in which each "{}" stands for a name_index: the indices in order,
/// or nothing when the name does not have that form.
std::optional<std::vector<std::uint64_t>> match_indices(std::string_view pattern,
                                                        std::string_view name);

class TensorContract {
 public:
  using Shape = std::vector<std::uint64_t>;
  struct Row {
    std::string_view suffix;
    Shape shape;
  };

  void add(std::string name, Shape shape) { want_[std::move(name)] = std::move(shape); }
  /// For every layer l < `layers`: `prefix` formatted with l ("model.layers.{}.") + each row's
  /// suffix.
  void per_layer(std::uint64_t layers, std::string_view prefix, std::initializer_list<Row> rows);

  bool contains(std::string_view name) const { return want_.find(name) != want_.end(); }
  /// Whether check() saw `name` (with either shape).
  bool seen(std::string_view name) const { return seen_.find(name) != seen_.end(); }
  /// Every tensor by name, in name order.
  const std::map<std::string, Shape, std::less<>>& tensors() const { return want_; }

  /// Records `name` (a contract tensor) as present without checking its shape: one refused for
  /// another reason is not also missing.
  void mark_present(std::string_view name);
  /// Checks one tensor of the checkpoint. True when the contract has it with this shape;
  /// otherwise a problem is appended: the bare name when the contract lacks it, "NAME: shape
  /// [..], config implies [..]" when its shape differs.
  bool check(std::string_view name, std::span<const std::uint64_t> shape,
             std::vector<std::string>& problems);
  /// The contract's tensors check() never saw, in name order.
  std::vector<std::string> missing() const;
  /// "missing NAME" appended for each of them.
  void report_missing(std::vector<std::string>& problems) const;

 private:
  std::map<std::string, Shape, std::less<>> want_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace qrepack
