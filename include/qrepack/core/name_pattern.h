// Regular expressions over tensor and record names: --select, --drop, --filter and every other
// pattern a user passes. RE2 (linear time, no recursion, no backtracking), so a name of any
// length from a hostile file costs time proportional to its length and constant stack. The
// syntax is the one users bring from Python tools (`(?i)gate_proj`, `\d`, `|`, classes);
// backreferences and lookaround, which need backtracking, are refused at compile time.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace re2 {
class RE2;
}

namespace qrepack {

class NamePattern {
 public:
  /// Compiles `pattern`; a bad one is a usage error naming `option` and RE2's reason.
  static Result<NamePattern> compile(const std::string& pattern, std::string_view option);
  /// True when the pattern matches anywhere in `name` (Python's re.search).
  bool search(std::string_view name) const;
  const std::string& pattern() const { return pattern_; }

 private:
  NamePattern(std::shared_ptr<const re2::RE2> re, std::string pattern)
      : re_(std::move(re)), pattern_(std::move(pattern)) {}
  std::shared_ptr<const re2::RE2> re_;  ///< immutable: shared by copies and threads
  std::string pattern_;
};

/// Cap on a pattern's length (RE2 also caps its compiled program's memory).
inline constexpr std::size_t kMaxPatternBytes = 4096;

}  // namespace qrepack
