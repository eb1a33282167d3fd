// The manual page and the bash/zsh completions, generated from the CLI11 tree that drives
// --help: every subcommand with its summary, every option with its description, and the value
// lists registered with with_choices (schemes, presets, encodings, folds, ...).
#include "cli/docgen.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/version.h"

namespace qrepack::cli {
namespace {

std::map<const CLI::Option*, std::vector<std::string>>& choice_table() {
  static std::map<const CLI::Option*, std::vector<std::string>> table;
  return table;
}

std::vector<const CLI::App*> subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); });
}

// The documented options (not -h/--help, which every command has and each format adds once).
std::vector<const CLI::Option*> options(const CLI::App& app) {
  return app.get_options([&app](const CLI::Option* o) {
    return !o->get_group().empty() && o != app.get_help_ptr() && o != app.get_help_all_ptr();
  });
}

bool takes_value(const CLI::Option& o) { return o.get_expected_max() > 0; }

// Every spelling of an option: "-o", "--out".
std::vector<std::string> spellings(const CLI::Option& o) {
  std::vector<std::string> out;
  for (const auto& s : o.get_snames()) out.push_back("-" + s);
  for (const auto& l : o.get_lnames()) out.push_back("--" + l);
  return out;
}

// ---- roff --------------------------------------------------------------------------------

// Text for roff: backslashes escaped, hyphens as \-, non-ASCII as \[uXXXX] (the page is
// ASCII whatever the locale), a leading '.' or '\'' protected.
std::string roff(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\\') {
        out += "\\e";
      } else if (c == '-') {
        out += "\\-";
      } else if (c == '\n') {
        out += ' ';
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // One UTF-8 sequence (the descriptions are the project's own, valid UTF-8).
    const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    std::uint32_t cp = c & (len == 4 ? 0x07u : len == 3 ? 0x0Fu : 0x1Fu);
    for (int k = 1; k < len && i + static_cast<std::size_t>(k) < text.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]) & 0x3Fu);
    }
    out += fmt::format("\\[u{:04X}]", cp);
    i += static_cast<std::size_t>(len);
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

// A description as a sentence (ends with a period) for the prose after it.
std::string sentence(std::string_view text) {
  std::string out = roff(text);
  if (!out.empty() && out.back() != '.') out += '.';
  return out;
}

std::string command_path(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) names.push_back(a->get_name());
  std::reverse(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, " "));
}

std::string synopsis(const CLI::App& app) {
  std::string s = fmt::format("\\fB{}\\fR", roff(command_path(app)));
  if (!subcommands(app).empty()) return s + " \\fICOMMAND\\fR ...";
  if (!options(app).empty()) s += " [\\fIOPTIONS\\fR]";
  for (const CLI::Option* o : options(app)) {
    if (!o->get_positional()) continue;
    const std::string p = fmt::format("\\fI{}\\fR{}", roff(o->get_name(true)),
                                      o->get_items_expected_max() > 1 ? " ..." : "");
    s += o->get_required() ? " " + p : " [" + p + "]";
  }
  return s;
}

void man_options(const CLI::App& app, std::string& out) {
  for (const CLI::Option* o : options(app)) {
    if (o->get_positional()) continue;
    std::vector<std::string> names;
    for (const std::string& n : spellings(*o)) names.push_back(fmt::format("\\fB{}\\fR", roff(n)));
    std::string head = fmt::format("{}", fmt::join(names, ", "));
    if (takes_value(*o)) head += fmt::format(" \\fI{}\\fR", roff(o->get_type_name()));
    out += fmt::format(".TP\n{}\n{}", head, sentence(o->get_description()));
    if (const auto* v = option_choices(*o)) {
      out += fmt::format(" Values: {}.", roff(fmt::format("{}", fmt::join(*v, ", "))));
    }
    if (o->get_required()) out += " Required.";
    out += "\n";
  }
}

void man_command(const CLI::App& app, std::string& out) {
  out += fmt::format(".SS {}\n{}\n.PP\n{}\n", roff(command_path(app)), synopsis(app),
                     roff(app.get_description()));
  for (const CLI::Option* o : options(app)) {
    if (o->get_positional()) {
      out +=
          fmt::format(".TP\n\\fI{}\\fR\n{}\n", roff(o->get_name(true)), roff(o->get_description()));
    }
  }
  man_options(app, out);
  for (const CLI::App* s : subcommands(app)) man_command(*s, out);
}

// ---- completion tables -------------------------------------------------------------------

// Every command path ("" for the top level, "convert", "fixture moe-fp8") with its app.
std::vector<std::pair<std::string, const CLI::App*>> command_paths(const CLI::App& root) {
  std::vector<std::pair<std::string, const CLI::App*>> out{{"", &root}};
  for (std::size_t i = 0; i < out.size(); ++i) {  // breadth first, no recursion
    const auto [path, app] = out[i];
    for (const CLI::App* s : subcommands(*app)) {
      out.emplace_back(path.empty() ? s->get_name() : path + " " + s->get_name(), s);
    }
  }
  return out;
}

std::vector<std::string> option_words(const CLI::App& app, bool with_value) {
  std::vector<std::string> out;
  for (const CLI::Option* o : options(app)) {
    if (o->get_positional() || takes_value(*o) != with_value) continue;
    for (const std::string& n : spellings(*o)) out.push_back(n);
  }
  return out;
}

std::string shell_words(const std::vector<std::string>& words) {
  return fmt::format("{}", fmt::join(words, " "));
}

// zsh: text inside a single-quoted word; `specials` are backslash-escaped ("[]:" in an
// _arguments spec's description, ":" in a _describe entry).
std::string zsh_quote(std::string_view text, std::string_view specials = "[]:\\") {
  std::string out;
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else if (specials.find(c) != std::string_view::npos) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string zsh_function_name(const std::string& path) {
  std::string name = path.empty() ? "_qrepack" : "_qrepack_";
  for (char c : path) name += (c == ' ' || c == '-') ? '_' : c;
  return name;
}

void zsh_command(const std::string& path, const CLI::App& app, std::string& out) {
  out += fmt::format("{}() {{\n", zsh_function_name(path));
  const auto subs = subcommands(app);
  std::string specs;
  for (const CLI::Option* o : options(app)) {
    const std::string desc = zsh_quote(o->get_description());
    if (o->get_positional()) {
      const auto* v = option_choices(*o);
      specs += fmt::format(" \\\n    '{}:{}:{}'", o->get_items_expected_max() > 1 ? "*" : "",
                           zsh_quote(o->get_name(true)),
                           v ? fmt::format("({})", zsh_quote(shell_words(*v))) : "_files");
      continue;
    }
    std::string action;
    if (takes_value(*o)) {
      const auto* v = option_choices(*o);
      action = fmt::format(":{}:{}", zsh_quote(o->get_type_name()),
                           v ? fmt::format("({})", zsh_quote(shell_words(*v))) : "_files");
    }
    for (const std::string& n : spellings(*o)) {
      specs += fmt::format(" \\\n    '{}[{}]{}'", n, desc, action);
    }
  }
  specs += " \\\n    '(- *)'{-h,--help}'[Print this help message and exit]'";
  if (subs.empty()) {
    out += fmt::format("  _arguments -s{}\n}}\n\n", specs);
    return;
  }
  out += fmt::format(
      "  local curcontext=\"$curcontext\" state line\n  _arguments -C{} \\\n"
      "    '1:command:->command' '*::argument:->argument'\n"
      "  case $state in\n    command)\n      local -a cmds\n      cmds=(\n",
      specs);
  for (const CLI::App* s : subs) {
    out += fmt::format("        '{}:{}'\n", s->get_name(), zsh_quote(s->get_description(), ":\\"));
  }
  out +=
      "      )\n      _describe -t commands 'command' cmds ;;\n    argument)\n"
      "      case $words[1] in\n";
  for (const CLI::App* s : subs) {
    const std::string sub_path = path.empty() ? s->get_name() : path + " " + s->get_name();
    out += fmt::format("        {}) {} ;;\n", s->get_name(), zsh_function_name(sub_path));
  }
  out += "      esac ;;\n  esac\n}\n\n";
}

}  // namespace

CLI::Option* with_choices(CLI::Option* option, std::vector<std::string> values) {
  choice_table()[option] = std::move(values);
  return option;
}

const std::vector<std::string>* option_choices(const CLI::Option& option) {
  const auto& t = choice_table();
  const auto it = t.find(&option);
  return it == t.end() ? nullptr : &it->second;
}

std::string man_page(const CLI::App& root) {
  std::string out = fmt::format(
      ".TH QREPACK 1 \"\" \"qrepack {}\" \"User Commands\"\n.SH NAME\nqrepack \\- {}\n"
      ".SH SYNOPSIS\n\\fBqrepack\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR] ...\n.br\n"
      "\\fBqrepack\\fR \\fB\\-\\-version\\fR | \\fB\\-\\-help\\fR\n.SH DESCRIPTION\n"
      "qrepack turns published model checkpoints into the exact packed weight layouts that "
      "inference engines and kernels consume, strictly validated, streaming and bit\\-exact. "
      "Every command takes \\fB\\-\\-help\\fR.\n.SH COMMANDS\n",
      kVersion, roff(root.get_description().substr(root.get_description().find(':') + 2)));
  for (const CLI::App* s : subcommands(root)) man_command(*s, out);
  out +=
      ".SH EXIT STATUS\n.TP\n0\nSuccess.\n.TP\n1\nA verification gate failed (check, verify, "
      "eval, check\\-load).\n.TP\n2\nBad input or usage: the message names the file, tensor "
      "and rule.\n.TP\n3\nAn I/O or environment failure, including another live run holding "
      "the output.\n"
      ".SH ENVIRONMENT\n.TP\n\\fBQREPACK_FORCE_TARGET\\fR\nPins the SIMD kernels to one "
      "Highway target this CPU runs (e.g. AVX2, SSE4, SCALAR); the output bytes do not "
      "change. An unknown or unsupported name stops with exit 2. \\fBqrepack \\-\\-version\\fR "
      "lists the targets.\n"
      ".SH FILES\n.TP\n\\fI/usr/share/doc/qrepack/\\fR\nThe README and the format, family, "
      "model and security documentation.\n"
      ".SH SEE ALSO\n\\fBqrepack completion bash\\fR, \\fBqrepack completion zsh\\fR.\n";
  return out;
}

std::string bash_completion(const CLI::App& root) {
  const auto paths = command_paths(root);
  std::string subs, opts, valued, values;
  for (const auto& [path, app] : paths) {
    std::vector<std::string> names;
    for (const CLI::App* s : subcommands(*app)) names.push_back(s->get_name());
    if (!names.empty())
      subs += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, shell_words(names));
    auto words = option_words(*app, false);
    const auto with_value = option_words(*app, true);
    words.insert(words.end(), with_value.begin(), with_value.end());
    words.emplace_back("--help");
    opts += fmt::format("    \"{}\") echo \"{}\" ;;\n", path, shell_words(words));
    if (!with_value.empty()) {
      valued += fmt::format("    \"{}\") echo \" {} \" ;;\n", path, shell_words(with_value));
    }
    for (const CLI::Option* o : options(*app)) {
      const auto* v = option_choices(*o);
      if (v == nullptr) continue;
      // A positional's values are keyed by the empty option name.
      const auto keys = o->get_positional() ? std::vector<std::string>{""} : spellings(*o);
      for (const std::string& n : keys) {
        values += fmt::format("    \"{}|{}\") echo \"{}\" ;;\n", path, n, shell_words(*v));
      }
    }
  }
  return fmt::format(
      R"SH(# bash completion for qrepack {0} (generated by 'qrepack completion bash' from its CLI tables)
_qrepack_subcommands() {{
  case "$1" in
{1}  esac
}}
_qrepack_options() {{
  case "$1" in
{2}  esac
}}
_qrepack_valued() {{
  case "$1" in
{3}  esac
}}
_qrepack_values() {{
  case "$1|$2" in
{4}  esac
}}
_qrepack() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  local path="" i w subs
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    subs=" $(_qrepack_subcommands "$path") "
    if [[ "$subs" == *" $w "* ]]; then path="${{path:+$path }}$w"; fi
  done
  local values
  values="$(_qrepack_values "$path" "$prev")"
  if [[ -n "$values" ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$values" -- "$cur")
    return 0
  fi
  if [[ "$(_qrepack_valued "$path")" == *" $prev "* ]]; then
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    return 0
  fi
  if [[ "$cur" == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_qrepack_options "$path")" -- "$cur")
    return 0
  fi
  subs="$(_qrepack_subcommands "$path")"
  if [[ -n "$subs" ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
    return 0
  fi
  values="$(_qrepack_values "$path" "")"
  if [[ -n "$values" ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$values" -- "$cur")
    return 0
  fi
  mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}}
complete -o filenames -F _qrepack qrepack
)SH",
      kVersion, subs, opts, valued, values);
}

std::string zsh_completion(const CLI::App& root) {
  std::string out = fmt::format(
      "#compdef qrepack\n# zsh completion for qrepack {} (generated by 'qrepack completion "
      "zsh' from its CLI tables)\n\n",
      kVersion);
  const auto paths = command_paths(root);
  for (auto it = paths.rbegin(); it != paths.rend(); ++it) zsh_command(it->first, *it->second, out);
  out += "_qrepack \"$@\"\n";
  return out;
}

}  // namespace qrepack::cli
