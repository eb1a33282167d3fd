// `qrepack reshard SRC -o OUT`: rewrites a checkpoint under a new shard limit and checks every
// tensor's bytes against the source after writing.
#include "qrepack/exec/reshard.h"

#include <fmt/format.h>

#include <memory>

#include "cli/command.h"
#include "cli/destination.h"
#include "cli/format.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/io/output_guard.h"

namespace qrepack::cli {
namespace {

struct ReshardCliOptions {
  std::string source;
  std::string out;
  std::string max_shard_size = "5GB";
  std::string select, drop;
};

Status run_reshard(const ReshardCliOptions& o) {
  ReshardOptions opts;
  QR_ASSIGN_OR_RETURN(limit, parse_size(o.max_shard_size));
  if (limit == 0) return Error(ErrorKind::kUsage, "--max-shard-size must be positive");
  opts.max_shard_bytes = limit;
  if (!o.select.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(o.select, "--select"));
    opts.select = std::move(re);
  }
  if (!o.drop.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(o.drop, "--drop"));
    opts.drop = std::move(re);
  }
  QR_ASSIGN_OR_RETURN(source, Checkpoint::open(o.source));
  // Checked on OUT itself: reshard() below only sees the staging directory.
  QR_TRY(ensure_output_dir_is_not_input_dir(o.out, source.files()));
  QR_ASSIGN_OR_RETURN(destination, Destination::open(o.out, false));
  QR_ASSIGN_OR_RETURN(rep, reshard(source, destination.write_dir(), opts));
  QR_TRY(destination.commit());
  fmt::print("wrote {} tensors ({}) into {} shard(s) in {}\n", rep.tensors, human_bytes(rep.bytes),
             rep.files.size(), o.out);
  if (rep.dropped > 0) fmt::print("left out by --select/--drop: {} tensors\n", rep.dropped);
  if (!rep.side_files.empty()) {
    std::string names;
    for (const auto& f : rep.side_files) names += (names.empty() ? "" : ", ") + f;
    fmt::print("copied: {}\n", names);
  }
  fmt::print("verified: {}/{} tensors byte-identical to the source (xxhash64)\n", rep.verified,
             rep.tensors);
  return ok_status();
}

}  // namespace

Action add_reshard(CLI::App& sub) {
  auto o = std::make_shared<ReshardCliOptions>();
  sub.add_option("SRC", o->source,
                 "Source checkpoint: file, index, directory, hf://ORG/REPO[@REV] or https:// URL")
      ->required();
  sub.add_option("-o,--out", o->out, "Output directory (created; must not hold a checkpoint)")
      ->required();
  sub.add_option("--max-shard-size", o->max_shard_size,
                 "Largest shard, e.g. 5GB (default), 500MB, 2GiB")
      ->capture_default_str();
  sub.add_option("--select", o->select, "Only keep tensors whose name matches this regex (RE2)");
  sub.add_option("--drop", o->drop, "Leave out tensors whose name matches this regex (RE2)");
  return [o] { return run_reshard(*o); };
}

}  // namespace qrepack::cli
