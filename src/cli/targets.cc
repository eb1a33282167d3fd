// `qrepack targets [--json]`: every container qrepack writes, printed from the target table
// that also drives convert's --target / --bits parsing, its --help, the man page and the
// completions (targets/container/target.cc).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "qrepack/targets/target.h"

namespace qrepack::cli {
namespace {

constexpr std::string_view kEveryTargetTakes =
    "--resume, --shard I/N + merge, --dry-run, --job-size, --threads, hf:// and https:// sources";

std::vector<std::string> strings(std::span<const std::string_view> v) {
  return {v.begin(), v.end()};
}

nlohmann::ordered_json target_json(const Target& t) {
  return {{"name", t.name},
          {"runtime", t.runtime},
          {"title", t.title},
          {"reference_tool", t.tool},
          {"engine_loads_it", t.has_reader},
          {"model_types",
           t.id == TargetId::kGeneric ? std::vector<std::string>{"*"} : strings(t.model_types)},
          {"default_for", strings(default_model_types(t))},
          {"default_scheme", t.default_scheme},
          {"schemes", t.schemes},
          {"bits", strings(t.bits)},
          {"flags", t.flags},
          {"every_target_takes", kEveryTargetTakes},
          {"refuses", t.refuses}};
}

void print_target(const Target& t) {
  fmt::print("{}{}\n", t.name,
             t.runtime.empty() ? std::string("  (no engine runtime loads it)")
                               : fmt::format("  loaded by {}", t.runtime));
  fmt::print("  {}\n", t.title);
  if (!t.tool.empty()) fmt::print("  reference tool: {}\n", t.tool);
  const auto defaults = default_model_types(t);
  if (t.id == TargetId::kGeneric) {
    fmt::print("  model_types: every family qrepack knows (asked for with --target generic)\n");
  } else {
    fmt::print(
        "  model_types: {}; the default for: {}\n", fmt::join(t.model_types, ", "),
        defaults.empty() ? std::string("none") : fmt::format("{}", fmt::join(defaults, ", ")));
  }
  fmt::print("  --to: {} (default {})\n", t.schemes, t.default_scheme);
  if (!t.flags.empty()) fmt::print("  takes: {}\n", t.flags);
  fmt::print("  refuses: {}\n", t.refuses);
}

}  // namespace

Action add_targets(CLI::App& sub) {
  auto json = std::make_shared<bool>(false);
  sub.add_flag("--json", *json, "Print the table as JSON");
  return [json]() -> Status {
    if (*json) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Target& t : targets()) out.push_back(target_json(t));
      fmt::print("{}\n", out.dump(1));
      return ok_status();
    }
    fmt::print("every target takes {}\n\n", kEveryTargetTakes);
    for (const Target& t : targets()) {
      print_target(t);
      fmt::print("\n");
    }
    return ok_status();
  };
}

}  // namespace qrepack::cli
