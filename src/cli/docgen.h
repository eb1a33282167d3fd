// The manual page and shell completions, generated from the same CLI11 tree that prints
// --help (docgen.cc), and the value lists options register for them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace qrepack::cli {

/// Registers the values `option` takes (shown in the manual, completed by the shells).
CLI::Option* with_choices(CLI::Option* option, std::vector<std::string> values);
/// The values registered for `option`, or null.
const std::vector<std::string>* option_choices(const CLI::Option& option);

/// qrepack.1 in roff (man(7) macros): every command, its arguments and options.
std::string man_page(const CLI::App& root);
/// A bash completion script (bash-completion's completions/qrepack).
std::string bash_completion(const CLI::App& root);
/// A zsh completion script (_qrepack, for a directory on $fpath).
std::string zsh_completion(const CLI::App& root);

}  // namespace qrepack::cli
