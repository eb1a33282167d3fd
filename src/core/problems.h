// Collects validation problems so a user sees all of them in one run: identical lines once,
// the first problem's kind decides the error's kind, long lists are cut with a count.
#pragma once

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

class Problems {
 public:
  void add(ErrorKind kind, std::string line) {
    if (!seen_.insert(line).second) return;
    if (lines_.empty()) kind_ = kind;
    lines_.push_back(std::move(line));
  }
  bool empty() const { return lines_.empty(); }
  /// One error listing the problems (the first `shown` of them, then how many more).
  Error to_error(std::size_t shown = 12) const {
    std::string out = fmt::format("{} problem(s): ", lines_.size());
    for (std::size_t i = 0; i < lines_.size() && i < shown; ++i) out += (i ? "; " : "") + lines_[i];
    if (lines_.size() > shown) out += fmt::format("; ... and {} more", lines_.size() - shown);
    return Error(kind_, out);
  }

 private:
  ErrorKind kind_ = ErrorKind::kUsage;
  std::vector<std::string> lines_;
  std::set<std::string> seen_;
};

}  // namespace qrepack
