// How subcommands plug into main: each one adds its options to a CLI11 subcommand and returns
// the action to run once parsing succeeded. Actions return a Status; main maps errors to exit
// codes through the ErrorKind table and prints them on one line on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>

#include "qrepack/core/error.h"
#include "qrepack/omega/pack_validate.h"

namespace qrepack::cli {

using Action = std::function<Status()>;

struct CommandDef {
  const char* name;
  const char* summary;
  Action (*add)(CLI::App& sub);
};

Action add_inspect(CLI::App& sub);
Action add_reshard(CLI::App& sub);
Action add_fixture(CLI::App& sub);
Action add_convert(CLI::App& sub);
Action add_check_load(CLI::App& sub);
Action add_verify(CLI::App& sub);
Action add_validate(CLI::App& sub);
Action add_check(CLI::App& sub);
Action add_merge(CLI::App& sub);
Action add_oracle(CLI::App& sub);
Action add_eval(CLI::App& sub);
Action add_targets(CLI::App& sub);
Action add_man(CLI::App& sub);
Action add_completion(CLI::App& sub);

/// --threads N: the worker thread count the action passes to set_thread_count (0: every core).
inline void add_threads_option(CLI::App& sub, std::size_t& threads) {
  sub.add_option("--threads", threads, "Worker threads (default 0: every core)")
      ->capture_default_str();
}

/// --select / --expected-records as validate and convert --to e0m3-sfb both take them.
Result<PackValidateOptions> pack_validate_options(const std::string& select,
                                                  std::optional<std::int64_t> expected_records);

}  // namespace qrepack::cli
