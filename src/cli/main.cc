// qrepack command-line entry point: one table of subcommands, one place that turns errors into
// exit codes (0 ok, 1 verification gate failed, 2 bad input or usage, 3 I/O or environment).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/git_version.h"
#include "core/version.h"
#include "kernels/kernels.h"
#include "remote/paths.h"

namespace {

using qrepack::cli::CommandDef;

constexpr std::array kCommands = {
    CommandDef{"convert", "Convert a checkpoint to the engine's int4/int8/bf16/f32/fp8 layout",
               qrepack::cli::add_convert},
    CommandDef{"merge", "Finish a convert --shard I/N run once every part is done",
               qrepack::cli::add_merge},
    CommandDef{"check-load", "Check a converted checkpoint loads as the C engine loads it",
               qrepack::cli::add_check_load},
    CommandDef{"verify", "Measure a conversion's error against its source (or decode a source)",
               qrepack::cli::add_verify},
    CommandDef{"eval", "Compare a conversion's next-token predictions with its source's",
               qrepack::cli::add_eval},
    CommandDef{"oracle", "Write reference next-token predictions in the model's runtime's schema",
               qrepack::cli::add_oracle},
    CommandDef{"validate", "Check an Omega dit_svdquant_v1 pack (CPU only, writes nothing)",
               qrepack::cli::add_validate},
    CommandDef{"check", "Measure E0M3 fidelity of an Omega layer or a converted artifact",
               qrepack::cli::add_check},
    CommandDef{"fixture", "Write a deterministic synthetic checkpoint in a real layout",
               qrepack::cli::add_fixture},
    CommandDef{"inspect", "List a checkpoint's tensors and recognise its layout",
               qrepack::cli::add_inspect},
    CommandDef{"reshard", "Rewrite a checkpoint with a new shard size, verifying every byte",
               qrepack::cli::add_reshard},
    CommandDef{"targets",
               "List the containers qrepack writes, the runtimes that load them and "
               "what each takes",
               qrepack::cli::add_targets},
    CommandDef{"man", "Print the manual page (roff): qrepack man | man -l -",
               qrepack::cli::add_man},
    CommandDef{"completion", "Print the bash or zsh completion script",
               qrepack::cli::add_completion},
};

int report(const qrepack::Error& e) {
  fmt::print(stderr, "qrepack: error: {}\n", e.to_string());
  return static_cast<int>(e.exit_code());
}

// Runs a subcommand. Every known failure is a Result; an exception that still escapes (out of
// memory, a bug) becomes one line and exit 3 rather than an abort with a core dump.
int run_action(const qrepack::cli::Action& action) {
  try {
    const qrepack::Status status = action();
    if (!status.ok()) return report(status.error());
    // A verdict from a remote source stands only if the bytes it read hash to what the
    // server publishes (commands that publish files check before they do).
    const qrepack::Status verified = qrepack::remote::verify_opened_files(true);
    if (!verified.ok()) return report(verified.error());
    const qrepack::remote::TransferTotals t = qrepack::remote::transfer_totals();
    if (t.requests > 0) {
      std::fflush(stdout);  // after the command's report, also when stdout is a pipe
      fmt::print(stderr,
                 "remote: received {} bytes in {} requests ({} retried, {} chunks read twice)\n",
                 t.bytes, t.requests, t.retries, t.refetched_chunks);
    }
    return 0;
  } catch (const std::bad_alloc&) {
    return report(qrepack::Error(qrepack::ErrorKind::kInternal, "out of memory"));
  } catch (const std::exception& e) {
    return report(qrepack::Error(qrepack::ErrorKind::kInternal,
                                 fmt::format("unexpected failure: {}", e.what())));
  } catch (...) {
    return report(qrepack::Error(qrepack::ErrorKind::kInternal, "unexpected failure"));
  }
}

}  // namespace

namespace {

// What built this binary and what it runs on: the version, the commit and whether the tree was
// clean, the compiler, the SIMD targets compiled in and the one dispatched to here.
std::string version_text(const std::vector<std::string>& available, const char* forced) {
#if defined(__clang__)
  const std::string compiler = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  const std::string compiler =
      fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  const std::string compiler = "unknown";
#endif
  return fmt::format(
      "qrepack {}\ncommit {} ({})\ncompiler {}\nSIMD targets compiled: {}\nSIMD target "
      "dispatched: {} ({}; this CPU runs {})",
      qrepack::kVersion, qrepack::kGitCommit, qrepack::kGitState, compiler,
      fmt::join(qrepack::kernels::compiled_targets(), " "), qrepack::kernels::active_target(),
      forced ? "pinned by QREPACK_FORCE_TARGET" : "the best; QREPACK_FORCE_TARGET=NAME pins one",
      fmt::join(available, " "));
}

// QREPACK_FORCE_TARGET pins the kernels' SIMD target (for comparing targets, or a machine whose
// best target misbehaves); an unknown or unsupported name is a usage error.
bool apply_forced_target(const char* forced, const std::vector<std::string>& available) {
  if (forced == nullptr) return true;
  if (qrepack::kernels::force_target(forced)) return true;
  fmt::print(stderr,
             "qrepack: usage error: QREPACK_FORCE_TARGET={}: not a SIMD target this binary has "
             "for this CPU (available: {})\n",
             forced, fmt::join(available, ", "));
  return false;
}

// Blocks of 128 KiB and more (job buffers, a shard header's text, a plan's vectors) are mapped
// and go back to the system when freed. glibc otherwise raises its mapping threshold after the
// first large block is freed, later large blocks then stay in the heap when freed, and the peak
// RSS counts memory the process no longer holds (about 4 MiB of it at 117k tensors).
void return_large_blocks_to_the_system() {
  constexpr int kLargeBlock = 128 * 1024;
  mallopt(M_MMAP_THRESHOLD, kLargeBlock);
  mallopt(M_TRIM_THRESHOLD, kLargeBlock);
}

}  // namespace

int main(int argc, char** argv) {
  return_large_blocks_to_the_system();
  const std::vector<std::string> available = qrepack::kernels::available_targets();
  const char* forced = std::getenv("QREPACK_FORCE_TARGET");
  if (forced != nullptr && *forced == '\0') forced = nullptr;
  if (!apply_forced_target(forced, available)) {
    return static_cast<int>(qrepack::ExitCode::kBadInput);
  }
  CLI::App app{
      "qrepack: turn model checkpoints into the exact packed layouts inference kernels "
      "consume",
      "qrepack"};
  app.set_version_flag("--version", version_text(available, forced));
  app.require_subcommand(1);
  app.fallthrough(false);
  std::vector<std::pair<CLI::App*, qrepack::cli::Action>> actions;
  for (const CommandDef& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    actions.emplace_back(sub, c.add(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "qrepack: usage error: {} (see 'qrepack --help')\n", e.what());
    return static_cast<int>(qrepack::ExitCode::kBadInput);
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    return run_action(action);
  }
  return static_cast<int>(qrepack::ExitCode::kBadInput);
}
