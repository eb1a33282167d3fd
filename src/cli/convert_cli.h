// The options of `qrepack convert`, shared with `qrepack merge` (which finishes a sharded run
// by rerunning the conversion in resume mode with the options the parts recorded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/destination.h"
#include "qrepack/core/error.h"
#include "qrepack/exec/container_exec.h"
#include "qrepack/exec/convert.h"
#include "qrepack/io/gguf.h"
#include "qrepack/targets/target.h"

namespace qrepack::cli {

struct ConvertCli {
  std::string source, out, to, bits, select, drop;  ///< to: empty = the pass's default
  std::string target;                 ///< --target: empty = the family's default (targets/target.h)
  std::string down_group;             ///< --down-group (colibri-qwen36 mixed down slab)
  bool mtp = false, indexer = false;  ///< --mtp, --indexer passes
  std::string max_shard_size, job_size;  ///< empty: the defaults (5GB, 8MiB)
  bool keep_unknown = false, keep_mtp = false, keep_indexer = false, unfuse = false;
  bool no_coverage = false;
  bool resume = false;
  bool dry_run = false;  ///< --dry-run: plan, sizes and disk, nothing read past headers
  std::string shard;     ///< "I/N"
  // e0m3-sfb only
  std::string fold;
  std::optional<std::int64_t> expected_records;
  bool keep_fp16 = false;
  bool act_out_scale_tensor = false;  ///< --act-out-scale-tensor (fold actnorm, torch 1.13)
  std::string format;
  bool progress = false;
  std::size_t threads = 0;
  // GGUF sources (colibri-olmoe)
  bool norm_topk_prob = false, qk_permuted = false;
  // colibri-qwen36: only the MTP head, beside an existing container
  bool mtp_only = false;
  std::string base_container;
};

Status run_convert(const ConvertCli& c);

/// The target a conversion writes: --target, else the family's default; refuses a target that
/// does not convert the checkpoint's model_type, and a family no engine runtime loads unless
/// --target generic asks for it.
Result<const Target*> resolve_target(const ConvertCli& c,
                                     const std::optional<std::string>& model_type);

/// check-load of a container target's directory, printed; exit 1 (the gate) when it fails.
Status print_target_check(const std::string& dir, const Target& t);

/// Appends to `bad` the GLM layout's flags set in `c` that no file-by-file target takes:
/// --select / --drop, the keep and coverage flags, --unfuse-experts, --max-shard-size and the
/// e0m3-sfb options (each target adds its own refusals and words the message).
void glm_layout_flags(const ConvertCli& c, std::vector<std::string>& bad);

/// The end of a file-by-file run's report, after OUT is published: a --shard worker's part
/// line; else "already complete" for a finished --resume, or the files reused and `wrote`;
/// then check-load of OUT as target `t`'s runtime loads it.
Status report_file_run(const ConvertCli& c, const ShardTask* shard, const ContainerReport& rep,
                       const std::string& wrote, const Target& t);

/// convert into a container target's own layout (colibri-qwen36, -qwen3, -llama, -olmoe).
Status run_convert_container(const ConvertCli& c, const Checkpoint& ck, const Target& t);

/// convert a GGUF file (or a directory holding one): a Gemma 4 GGUF (or --target
/// colibri-gemma4) into colibri-gemma4's expert packs, any other into colibri-olmoe.
Status run_convert_gguf(const ConvertCli& c);
/// The Gemma 4 half of run_convert_gguf, for the opened file at `path`.
Status run_convert_gemma4(const ConvertCli& c, const std::string& path, const GgufFile& file);

/// Where a conversion writes: a --shard worker into OUT under its part file's lock, a
/// --resume run (or an --mtp / --indexer pass) into OUT, created when missing, under OUT's
/// lock; a plain run into a staged directory.
Result<Destination> open_destination(const ConvertCli& c, const ShardTask* shard);

/// --shard I/N parsed (nullopt without it); with --resume it is a usage error (a worker
/// already resumes).
Result<std::optional<ShardTask>> shard_task_of(const ConvertCli& c);

/// The line a --shard worker ends with: what it wrote and what to run next.
void print_part_line(const ShardTask& s, std::size_t written, std::size_t total,
                     const std::string& out, double seconds);

/// "I/N" with 0 <= I < N (N >= 1).
Result<ShardTask> parse_shard_task(const std::string& text);

}  // namespace qrepack::cli
