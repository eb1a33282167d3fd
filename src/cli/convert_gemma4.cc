// `qrepack convert MODEL.gguf -o OUT` for a Gemma 4 GGUF (or --target colibri-gemma4): the
// PACKED_DIR colibri's Gemma 4 runtime maps (src/targets/gemma4/gemma4_pack.h), written on the
// one executor, staged, published atomically and check-loaded (every record against the GGUF).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/convert_cli.h"
#include "cli/destination.h"
#include "cli/format.h"
#include "exec/byte_files.h"
#include "exec/run_state.h"
#include "qrepack/io/output_guard.h"
#include "targets/gemma4/gemma4_pack.h"

namespace qrepack::cli {
namespace {

Status refuse_flags(const ConvertCli& c) {
  std::vector<std::string> bad;
  if (!c.to.empty() && c.to != "as-stored") bad.push_back("--to " + c.to);
  if (!c.bits.empty()) bad.emplace_back("--bits");
  if (!c.down_group.empty()) bad.emplace_back("--down-group");
  if (c.mtp || c.indexer || c.mtp_only) bad.emplace_back("--mtp/--indexer/--mtp-only");
  glm_layout_flags(c, bad);
  if (c.norm_topk_prob || c.qk_permuted) bad.emplace_back("--norm-topk-prob/--qk-permuted");
  if (bad.empty()) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("a Gemma 4 GGUF packs into --target colibri-gemma4 (its Q4_0 experts "
                           "copied as stored) and takes none of {}",
                           fmt::join(bad, ", ")))
      .with_rule("target.flags");
}

}  // namespace

Status run_convert_gemma4(const ConvertCli& c, const std::string& path, const GgufFile& file) {
  QR_TRY(refuse_flags(c));
  QR_TRY(ensure_output_dir_is_not_input_dir(c.out, file.paths()));
  QR_ASSIGN_OR_RETURN(pack, plan_gemma4_pack(file));
  const Gemma4Dims& d = pack.dims;
  const Gemma4Layer& l0 = pack.layers.front();
  std::uint64_t bytes = 0;
  for (const Gemma4Layer& l : pack.layers) bytes += l.file_size;
  fmt::print(
      "PLAN: target colibri-gemma4 (runtime c/gemma4.c, PACKED_DIR manifest.json + "
      "layer-NN.g4ex), --to as-stored -> {}/\n",
      c.out);
  fmt::print(
      "source: GGUF v{} {}, gemma4: {} blocks, {} experts (top-{}), width {}, expert "
      "width {}\n",
      file.header().version, path, d.layers, d.experts, d.used, d.width, d.expert_width);
  fmt::print("  {:<40} {:>6}\n", "expert records (Q4_0 gate|up|down)", d.layers * d.experts);
  fmt::print("  record: {} payload bytes at a stride of {}; {} per layer file\n", l0.payload,
             l0.stride, human_bytes(l0.file_size));
  fmt::print("  writes manifest.json and {} file(s), {} ({} bytes)\n", pack.layers.size(),
             human_bytes(bytes), bytes);
  if (c.dry_run) {
    fmt::print("dry run: nothing read past the header, nothing written\n");
    return ok_status();
  }
  QR_ASSIGN_OR_RETURN(shard, shard_task_of(c));
  QR_ASSIGN_OR_RETURN(destination, open_destination(c, shard ? &*shard : nullptr));
  const ContainerRun run{c.resume, shard ? &*shard : nullptr};
  const std::vector<const ByteSource*> sources = file.sources();
  const ByteRunSources from{sources, file.path(), source_stamp(file.paths())};
  QR_ASSIGN_OR_RETURN(rep,
                      write_byte_files(pack.run, from, destination.write_dir(), run,
                                       c.progress ? ProgressMode::kAlways : ProgressMode::kAuto));
  QR_TRY(destination.commit());
  return report_file_run(
      c, shard ? &*shard : nullptr, rep,
      fmt::format("wrote {} expert records ({}) in {} file(s) and manifest.json to {} in {:.2f} s",
                  d.layers * d.experts, human_bytes(rep.bytes_written), rep.files, c.out,
                  rep.seconds),
      target(TargetId::kColibriGemma4));
}

}  // namespace qrepack::cli
