// `qrepack man` and `qrepack completion bash|zsh`: print the manual page and the completion
// scripts, generated from the command tree they are part of (docgen.cc). The build installs
// their output (cmake/install.cmake).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/docgen.h"

namespace qrepack::cli {
namespace {

const CLI::App& root_of(const CLI::App& sub) {
  const CLI::App* a = &sub;
  while (a->get_parent() != nullptr) a = a->get_parent();
  return *a;
}

Status print_text(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return Error(ErrorKind::kIoWrite, "cannot write to standard output");
  }
  return ok_status();
}

}  // namespace

Action add_man(CLI::App& sub) {
  return [&sub]() -> Status { return print_text(man_page(root_of(sub))); };
}

Action add_completion(CLI::App& sub) {
  auto shell = std::make_shared<std::string>();
  with_choices(sub.add_option("SHELL", *shell, "bash or zsh")->required(), {"bash", "zsh"});
  return [&sub, shell]() -> Status {
    if (*shell == "bash") return print_text(bash_completion(root_of(sub)));
    if (*shell == "zsh") return print_text(zsh_completion(root_of(sub)));
    return Error(ErrorKind::kUsage,
                 "completion: SHELL must be bash or zsh, got \"" + shell->substr(0, 64) + "\"");
  };
}

}  // namespace qrepack::cli
