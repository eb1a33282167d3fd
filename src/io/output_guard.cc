#include "qrepack/io/output_guard.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>

namespace qrepack {
namespace fs = std::filesystem;
namespace {

bool same_inode(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::path(p) : r;
}

Error output_is_input(const std::string& output, const std::string& input) {
  return Error(ErrorKind::kOutputIsInput,
               fmt::format("output would overwrite input {}; choose another output path", input))
      .in_file(output)
      .with_rule("output.not_input");
}

}  // namespace

Status ensure_output_file_is_not_input(const std::string& output,
                                       const std::vector<std::string>& inputs) {
  const fs::path out = resolved(output);
  for (const std::string& in : inputs) {
    if (resolved(in) == out || same_inode(output, in)) return output_is_input(output, in);
  }
  return ok_status();
}

Status ensure_output_dir_is_not_input_dir(const std::string& output_dir,
                                          const std::vector<std::string>& inputs) {
  const fs::path out = resolved(output_dir);
  for (const std::string& in : inputs) {
    const fs::path parent = resolved(in).parent_path();
    if (parent == out || same_inode(output_dir, parent.string())) {
      return output_is_input(output_dir, in);
    }
  }
  return ok_status();
}

}  // namespace qrepack
