// check-load, convert and inspect for the families the engine runs as downloaded.
#include "cli/release_cli.h"

#include <fmt/format.h>

#include <algorithm>

#include "qrepack/targets/target.h"
#include "targets/releases/release_check.h"

namespace qrepack::cli {
namespace {

constexpr std::size_t kListed = 12;  // names printed per list; the rest are counted

void print_list(const char* what, const std::vector<std::string>& names) {
  const std::size_t shown = std::min(names.size(), kListed);
  for (std::size_t i = 0; i < shown; ++i) fmt::print("  {} {}\n", what, names[i]);
  if (names.size() > shown) fmt::print("  ... and {} more {}\n", names.size() - shown, what);
}

}  // namespace

Status refuse_release_convert(std::string_view model_type) {
  const ReleaseFamily* f = release_family(model_type);
  if (!f || default_target(model_type)) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("no conversion needed: {} (model_type {}) runs as downloaded in {}; "
                           "check the directory with 'qrepack check-load DIR'",
                           f->title, model_type, f->runtime))
      .with_rule("release.no_conversion");
}

Status release_check_load(const std::string& dir, bool& handled) {
  handled = false;
  QR_ASSIGN_OR_RETURN(model_type, read_model_type(dir));
  const ReleaseFamily* f = model_type ? release_family(*model_type) : nullptr;
  if (!f) return ok_status();
  handled = true;
  QR_ASSIGN_OR_RETURN(r, check_release(dir, *model_type));
  fmt::print("check-load ({}, {} as downloaded): {} missing tensors, {} unloadable ({} checked)\n",
             f->runtime, f->title, r.missing.size(), r.unloadable.size(), r.checked);
  print_list("missing", r.missing);
  print_list("unloadable", r.unloadable);
  if (!r.ok()) {
    return Error(ErrorKind::kVerificationFailed, fmt::format("{} missing and {} unloadable tensors",
                                                             r.missing.size(), r.unloadable.size()))
        .in_file(dir)
        .with_rule("check_load");
  }
  return ok_status();
}

std::optional<std::string> release_model_line(std::string_view model_type) {
  const ReleaseFamily* f = release_family(model_type);
  if (!f) return std::nullopt;
  return fmt::format("{} (model_type {}): no conversion needed: {} runs these files as downloaded",
                     f->title, model_type, f->runtime);
}

}  // namespace qrepack::cli
