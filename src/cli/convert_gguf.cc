// `qrepack convert MODEL.gguf --out DIR` (or a directory holding one .gguf): a Gemma 4 GGUF's
// expert packs (convert_gemma4.cc), else the colibri-olmoe container from an OLMoE GGUF, as
// upstream's convert_gguf_to_olmoe.py writes it (src/targets/olmoe/olmoe_gguf.h), staged,
// published atomically and check-loaded.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "cli/convert_cli.h"
#include "cli/destination.h"
#include "cli/format.h"
#include "qrepack/io/gguf.h"
#include "qrepack/io/output_guard.h"
#include "targets/olmoe/olmoe_gguf.h"

namespace qrepack::cli {
namespace {

Status refuse_flags(const ConvertCli& c) {
  std::vector<std::string> bad;
  if (!c.target.empty() && c.target != "colibri-olmoe") {
    bad.push_back("--target " + c.target + " (a Gemma 4 GGUF takes colibri-gemma4)");
  }
  if (!c.to.empty() && c.to != "int8-row") bad.push_back("--to " + c.to);
  if (!c.bits.empty()) bad.emplace_back("--bits");
  if (!c.down_group.empty()) bad.emplace_back("--down-group");
  if (c.mtp || c.indexer) bad.emplace_back("--mtp/--indexer");
  glm_layout_flags(c, bad);
  if (bad.empty()) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("a GGUF source converts into --target colibri-olmoe --to int8-row "
                           "(olmoe.c's container, as convert_gguf_to_olmoe.py writes it) and "
                           "takes none of {}",
                           fmt::join(bad, ", ")))
      .with_rule("target.flags");
}

}  // namespace

Status run_convert_gguf(const ConvertCli& c) {
  QR_ASSIGN_OR_RETURN(path, resolve_gguf_file(c.source));
  QR_ASSIGN_OR_RETURN(file, GgufFile::open(path));
  // The target general.architecture routes to, unless --target names one.
  const GgufValue* arch = file.header().find("general.architecture");
  const bool gemma4 = arch && arch->type == GgufType::kString && arch->s == "gemma4";
  if (c.target == "colibri-gemma4" || (c.target.empty() && gemma4)) {
    return run_convert_gemma4(c, path, file);
  }
  QR_TRY(refuse_flags(c));
  QR_TRY(ensure_output_dir_is_not_input_dir(c.out, file.paths()));
  GgufOlmoeOptions o;
  o.norm_topk_prob = c.norm_topk_prob;
  o.qk_permuted = c.qk_permuted;
  QR_ASSIGN_OR_RETURN(plan, plan_olmoe_gguf(file, o));
  const GgufOlmoeDims& d = plan.dims;
  fmt::print(
      "PLAN: target colibri-olmoe (runtime c/olmoe.c, as convert_gguf_to_olmoe.py writes "
      "it), --to int8-row -> {}/\n",
      c.out);
  fmt::print(
      "source: GGUF v{} {}{}, olmoe: {} layers, {} experts (top-{}), hidden {}, inter {}, "
      "vocab {}\n",
      file.header().version, path,
      file.paths().size() > 1 ? fmt::format(" (split: {} parts)", file.paths().size()) : "",
      d.layers, d.experts, d.topk, d.hidden, d.inter, d.vocab);
  fmt::print("  {:<40} {:>6}\n", "dense tensors dequantized", plan.sources.size() - 3 * d.layers);
  fmt::print("  {:<40} {:>6}\n", "experts merged int8-row", d.layers * d.experts);
  fmt::print("  writes config.json, tokenizer.json and {} file(s)\n", plan.files.size());
  if (c.dry_run) {
    fmt::print("dry run: nothing read past the header, nothing written\n");
    return ok_status();
  }
  QR_ASSIGN_OR_RETURN(shard, shard_task_of(c));
  QR_ASSIGN_OR_RETURN(destination, open_destination(c, shard ? &*shard : nullptr));
  const ContainerRun run{c.resume, shard ? &*shard : nullptr};
  QR_ASSIGN_OR_RETURN(rep, write_olmoe_gguf(file, plan, o, destination.write_dir(), run));
  QR_TRY(destination.commit());
  return report_file_run(
      c, shard ? &*shard : nullptr, rep,
      fmt::format("wrote {} tensors ({}) in {} file(s) to {} in {:.2f} s", rep.tensors,
                  human_bytes(rep.bytes_written), rep.files, c.out, rep.seconds),
      target(TargetId::kColibriOlmoe));
}

}  // namespace qrepack::cli
