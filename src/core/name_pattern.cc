#include "qrepack/core/name_pattern.h"

#include <fmt/format.h>
#include <re2/re2.h>

namespace qrepack {

Result<NamePattern> NamePattern::compile(const std::string& pattern, std::string_view option) {
  if (pattern.size() > kMaxPatternBytes) {
    return Error(ErrorKind::kUsage, fmt::format("{}: a pattern of {} bytes is over the cap of {}",
                                                option, pattern.size(), kMaxPatternBytes))
        .with_rule("pattern.max_bytes");
  }
  RE2::Options opts;
  opts.set_log_errors(false);
  auto re = std::make_shared<const RE2>(pattern, opts);
  if (!re->ok()) {
    return Error(ErrorKind::kUsage,
                 fmt::format("{}: invalid regular expression \"{}\": {} (RE2 syntax: no "
                             "backreferences or lookaround)",
                             option, pattern, re->error()))
        .with_rule("pattern.syntax");
  }
  return NamePattern(std::move(re), pattern);
}

bool NamePattern::search(std::string_view name) const {
  return RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *re_);
}

}  // namespace qrepack
