// `qrepack convert SRC -o OUT --to SCHEME`: FP8-block / BF16 / F16 / F32 checkpoints to the C
// engine's int4 / int8 containers, bf16, f32 or FP8 block, with unfusing, a rule table,
// a coverage gate, a manifest and a check-load pass at the end.
#include "qrepack/exec/convert.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "cli/command.h"
#include "cli/convert_cli.h"
#include "cli/destination.h"
#include "cli/docgen.h"
#include "cli/dry_run.h"
#include "cli/format.h"
#include "cli/release_cli.h"
#include "qrepack/io/gguf.h"
#include "qrepack/io/output_guard.h"
#include "qrepack/io/output_txn.h"
#include "qrepack/omega/e0m3_convert.h"
#include "qrepack/omega/pack_validate.h"
#include "qrepack/omega/qat_convert.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/plan/convert_plan.h"
#include "qrepack/targets/check_load.h"
#include "qrepack/verify/check_load.h"
#include "remote/paths.h"

namespace qrepack::cli {
namespace {

using namespace std::string_view_literals;

constexpr std::array kFolds = {std::pair{"none"sv, E0m3Fold::kNone},
                               std::pair{"mean"sv, E0m3Fold::kMean},
                               std::pair{"actnorm"sv, E0m3Fold::kActnorm}};
constexpr std::array kFormats = {std::pair{"pt"sv, E0m3Container::kTorch},
                                 std::pair{"safetensors"sv, E0m3Container::kSafetensors}};

// The value named `word` in a (name, value) table, or a usage error listing the names.
template <typename Table>
auto pick(std::string_view option, const Table& table, const std::string& word)
    -> Result<typename Table::value_type::second_type> {
  for (const auto& [name, value] : table) {
    if (name == word) return value;
  }
  return Error(ErrorKind::kUsage,
               fmt::format("{} must be {}, got \"{}\"", option, or_list(table_names(table)), word));
}

// A MIP-QAT pi0.5 checkpoint (safetensors) to the omega_e0m3_v1 .pt (docs/formats/
// omega-e0m3.md §8): fold none, the identity aux, the action expert's 126 projections.
Status run_convert_qat(const ConvertCli& c) {
  if ((!c.fold.empty() && c.fold != "none") || c.act_out_scale_tensor ||
      (!c.format.empty() && c.format != "pt")) {
    return Error(ErrorKind::kUsage,
                 "a QAT checkpoint converts with --fold none into a .pt artifact only (it has no "
                 "scale table to fold)");
  }
  QatValidateOptions v;
  if (!c.select.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(c.select, "--select"));
    v.select = std::move(re);
  }
  if (c.expected_records) {
    if (*c.expected_records <= 0) {
      return Error(ErrorKind::kUsage, "--expected-records must be positive");
    }
    v.expected_records = static_cast<std::uint64_t>(*c.expected_records);
  }
  QR_TRY(ensure_output_file_is_not_input(c.out, {c.source}));
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(c.out));
  QR_ASSIGN_OR_RETURN(ck, SafetensorsFile::open(c.source));
  QR_ASSIGN_OR_RETURN(val, validate_qat_checkpoint(ck, v));
  fmt::print("validated {}/{} action-expert weights\n", val.layers.size(), val.expected);
  QatConvertOptions o;
  o.keep_fp16 = c.keep_fp16;
  o.ckpt_label = c.source;
  o.progress = c.progress ? ProgressMode::kAlways : ProgressMode::kAuto;
  QR_ASSIGN_OR_RETURN(rep, convert_qat_e0m3(ck, val, o, c.out));
  fmt::print("wrote {} E0M3 weights (QAT, fold none) to {} in {:.2f} s\n", rep.records, c.out,
             rep.seconds);
  return ok_status();
}

Status run_convert_omega(const ConvertCli& c) {
  if (!c.bits.empty() || !c.drop.empty() || c.keep_unknown || c.keep_mtp || c.keep_indexer ||
      c.unfuse || c.no_coverage || c.resume || !c.shard.empty() || !c.max_shard_size.empty() ||
      !c.job_size.empty() || c.dry_run) {
    return Error(ErrorKind::kUsage,
                 "--to e0m3-sfb takes only --fold, --select, --expected-records, --keep-fp16, "
                 "--act-out-scale-tensor, --format and --progress");
  }
  if (c.source.ends_with(".safetensors")) return run_convert_qat(c);
  if (c.act_out_scale_tensor && (c.fold != "actnorm" || c.format == "safetensors")) {
    return Error(ErrorKind::kUsage,
                 "--act-out-scale-tensor goes with --fold actnorm and the .pt format");
  }
  E0m3ConvertOptions o;
  o.act_out_scale_tensor = c.act_out_scale_tensor;
  QR_ASSIGN_OR_RETURN(fold, pick("--fold", kFolds, c.fold.empty() ? "none" : c.fold));
  o.fold = fold;
  o.keep_fp16 = c.keep_fp16;
  QR_ASSIGN_OR_RETURN(container, pick("--format", kFormats, c.format.empty() ? "pt" : c.format));
  o.container = container;
  o.progress = c.progress ? ProgressMode::kAlways : ProgressMode::kAuto;
  QR_ASSIGN_OR_RETURN(v, pack_validate_options(c.select, c.expected_records));
  // The output must not be the pack under any name, checked before the pack is read.
  QR_TRY(ensure_output_file_is_not_input(c.out, {c.source}));
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(c.out));
  QR_ASSIGN_OR_RETURN(pack, TorchFile::open(c.source));
  QR_ASSIGN_OR_RETURN(val, validate_omega_pack(pack, v));
  fmt::print("validated {}/{} records\n", val.records.size(), val.expected);
  QR_ASSIGN_OR_RETURN(rep, convert_pack_e0m3(pack, val, o, c.out));
  if (o.fold == E0m3Fold::kActnorm) {
    fmt::print(
        "note: --fold actnorm's act_out_scale is a geometric mean (log, mean, exp in f32) whose "
        "last bits depend on the reduction order: FlashRT's torch computation can differ from "
        "qrepack's by a few ulp, and then about 1 E0M3 code in 10^7 with it (measured, "
        "docs/formats/omega-e0m3.md §4); {}\n",
        o.act_out_scale_tensor || o.container == E0m3Container::kSafetensors
            ? "act_out_scale is a 0-d float32 tensor (torch 1.13 loads it with weights_only)"
            : "act_out_scale is a Python float as FlashRT writes it (weights_only needs torch "
              ">= 2.0; --act-out-scale-tensor for torch 1.13)");
  }
  fmt::print("wrote {} E0M3 weights (fold {}) to {} in {:.2f} s ({:.3f} GB/s of fp16 input)\n",
             rep.records, e0m3_fold_name(o.fold), c.out, rep.seconds,
             rep.seconds > 0 ? static_cast<double>(rep.fp16_bytes) / rep.seconds / 1e9 : 0.0);
  return ok_status();
}

Status print_check_load(const std::string& dir, bool include_main = true) {
  QR_ASSIGN_OR_RETURN(cl, check_load(dir, include_main));
  std::string formats;
  for (const auto& [f, n] : cl.formats)
    formats += fmt::format("{}{} {}", formats.empty() ? "" : ", ", n, f);
  fmt::print("check-load{}: {} missing tensors, {} unloadable ({} checked{}: {})\n",
             include_main ? "" : " (the passes alone: OUT holds no main conversion)",
             cl.missing.size(), cl.unloadable.size(), cl.checked,
             cl.passes.empty() ? "" : fmt::format(", with {}", fmt::join(cl.passes, " and ")),
             formats);
  for (const auto& m : cl.missing) fmt::print("  missing {}\n", m);
  for (const auto& u : cl.unloadable) fmt::print("  unloadable {}\n", u);
  if (!cl.ok()) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("{} missing and {} unloadable tensors", cl.missing.size(),
                             cl.unloadable.size()))
        .in_file(dir)
        .with_rule("check_load");
  }
  return ok_status();
}

// Whether OUT holds the main conversion (a pass may stand alone: check-load checks it alone).
bool holds_main(const std::string& out, ConvertPass pass) {
  return pass == ConvertPass::kMain ||
         std::filesystem::exists(std::filesystem::path(out) / "qrepack.json");
}

// --mtp / --indexer: which pass, and the flags that only make sense for the main run.
Result<ConvertPass> parse_pass(const ConvertCli& c) {
  if (!c.mtp && !c.indexer) return ConvertPass::kMain;
  if (c.mtp && c.indexer) {
    return Error(ErrorKind::kUsage, "--mtp and --indexer are separate passes: run them one by one");
  }
  if (c.keep_mtp || c.keep_indexer || c.unfuse || c.resume || !c.shard.empty()) {
    return Error(ErrorKind::kUsage,
                 "--mtp and --indexer take none of --keep-mtp, --keep-indexer, --unfuse-experts, "
                 "--resume, --shard");
  }
  return c.mtp ? ConvertPass::kMtp : ConvertPass::kIndexer;
}

// One line with everything resolved, printed before any work (the engine converter's [PLAN]).
void print_plan_line(const ConvertOptions& o, const std::string& out, const Target* t) {
  std::string bits;
  for (const auto& [name, b] : resolved_bit_widths(o)) {
    bits += fmt::format(" {}={}", name, bits_label(b));
  }
  const std::string files = o.pass == ConvertPass::kMain
                                ? "model*.safetensors"
                                : fmt::format("{}*.safetensors", pass_file_prefix(o.pass));
  fmt::print("PLAN: target {} ({}), pass {}, --to {};{}{} -> {}/{}\n", t ? t->name : "colibri-glm",
             t && !t->has_reader ? "no known engine runtime loads it" : "runtime c/colibri.c",
             convert_pass_name(o.pass), o.scheme.name(), bits.empty() ? "" : " bits", bits, out,
             files);
  if (o.pass == ConvertPass::kMtp && o.scheme.group == 0 && class_bits(o, WeightClass::kMtp) < 8 &&
      o.scheme.kind != SchemeKind::kFp8Passthrough) {
    fmt::print(stderr,
               "warning: a per-row int4/int2 MTP head loses nearly all draft acceptance "
               "(eh_proj's halves differ 20-30x in scale); int8-row is the default for --mtp\n");
  }
}

// The GLM-style conversion (colibri-glm, generic) of `opened` (null only for Omega packs).
Status run_convert_engine(const ConvertCli& c, Checkpoint* opened, const Target* t) {
  ConvertOptions o;
  o.target = t;
  o.progress = c.progress ? ProgressMode::kAlways : ProgressMode::kAuto;
  QR_ASSIGN_OR_RETURN(pass, parse_pass(c));
  o.pass = pass;
  const std::string to =
      !c.to.empty() ? c.to : (pass == ConvertPass::kMain ? "int4-g128" : "int8-row");
  QR_ASSIGN_OR_RETURN(scheme, parse_scheme(to));
  if (scheme.kind == SchemeKind::kE0m3Sfb) {
    if (pass != ConvertPass::kMain) {
      return Error(ErrorKind::kUsage, "--mtp and --indexer convert checkpoints, not Omega packs");
    }
    return run_convert_omega(c);
  }
  if (!c.fold.empty() || c.expected_records.has_value() || c.keep_fp16 || c.act_out_scale_tensor ||
      !c.format.empty()) {
    return Error(ErrorKind::kUsage,
                 "--fold, --expected-records, --keep-fp16 and --format go with --to e0m3-sfb");
  }
  o.scheme = scheme;
  QR_ASSIGN_OR_RETURN(bits, parse_bits(c.bits, scheme));
  o.bits = bits;
  if (c.unfuse && scheme.kind != SchemeKind::kBf16) {
    return Error(ErrorKind::kUsage, "--unfuse-experts only goes with --to bf16");
  }
  o.unfuse_only = c.unfuse;
  if (!c.select.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(c.select, "--select"));
    o.select = std::move(re);
  }
  if (!c.drop.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(c.drop, "--drop"));
    o.drop = std::move(re);
  }
  o.keep_unknown = c.keep_unknown;
  o.keep_mtp = c.keep_mtp;
  o.keep_indexer = c.keep_indexer;
  o.skip_coverage = c.no_coverage;
  QR_ASSIGN_OR_RETURN(limit, parse_size(c.max_shard_size.empty() ? "5GB" : c.max_shard_size));
  if (limit == 0) return Error(ErrorKind::kUsage, "--max-shard-size must be positive");
  o.max_shard_bytes = limit;
  QR_ASSIGN_OR_RETURN(job, parse_size(c.job_size.empty() ? "8MiB" : c.job_size));
  if (job == 0) return Error(ErrorKind::kUsage, "--job-size must be positive");
  o.job_bytes = job;

  if (!opened) return Error(ErrorKind::kInternal, "convert: no checkpoint opened");
  Checkpoint& ck = *opened;
  o.defer_scale_checks = remote::is_remote_path(ck.directory());
  if (t && !t->has_reader && !c.target.empty()) {  // asked for: said once more on stderr
    fmt::print(stderr,
               "warning: --target generic: no known engine runtime loads this container (the "
               "GLM runtime reads the GLM-MoE-DSA family only); qrepack.json records it\n");
  }
  QR_TRY(ensure_output_dir_is_not_input_dir(c.out, ck.files()));
  QR_ASSIGN_OR_RETURN(shard, shard_task_of(c));
  print_plan_line(o, c.out, t);
  QR_ASSIGN_OR_RETURN(plan, plan_conversion(ck, o));

  std::size_t consumed = 0, dropped = 0, unfused = 0;
  for (const auto& s : plan.sources) {
    consumed += s.disposition == SourceDisposition::kConsume;
    dropped += s.disposition == SourceDisposition::kDrop;
    unfused += s.disposition == SourceDisposition::kUnfuse;
  }
  for (const std::string& w : plan.warnings) fmt::print(stderr, "warning: {}\n", w);
  fmt::print("family: {}\n", plan_family_line(plan));
  fmt::print(
      "plan: {} source tensors -> {} outputs ({} scale sidecars consumed, {} fused "
      "expert tensors unfused, {} dropped by rule)\n",
      ck.tensors().size(), plan.outputs.size(), consumed, unfused, dropped);
  for (const auto& [k, n] : plan.class_counts) fmt::print("  {:<24} {:>6}\n", k, n);
  // Drops by rule, with the first names of each (the manifest lists every one): the real
  // checkpoint's MTP layer and indexers are about two thousand tensors.
  std::map<std::string, std::vector<std::string>> drops;
  for (const std::uint32_t i : ck.by_name()) {
    const SourceRecord& s = plan.sources[i];
    if (s.disposition == SourceDisposition::kDrop) {
      drops[std::string(plan.rule_of(s))].emplace_back(ck.tensors()[i].entry->name);
    }
  }
  for (const auto& [rule, names] : drops) {
    const std::size_t shown = std::min<std::size_t>(names.size(), 3);
    fmt::print("  dropped {} by rule {}: {}{}\n", names.size(), rule,
               fmt::join(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
               names.size() > shown ? ", ... (all in qrepack.json)" : "");
  }
  if (c.dry_run) return print_dry_run(ck, plan, o.max_shard_bytes, c.out);
  // Resumable runs and passes write into OUT as they go; a plain run builds OUT beside it and
  // renames it into place at the end, so a failure or a kill leaves nothing at OUT.
  QR_ASSIGN_OR_RETURN(destination, open_destination(c, shard ? &*shard : nullptr));
  QR_ASSIGN_OR_RETURN(rep, execute_conversion(ck, plan, o, destination.write_dir(), c.resume,
                                              shard ? &*shard : nullptr));
  QR_TRY(destination.commit());
  const bool verify = plan.config && !c.no_coverage;
  // check-load opens the output: the plan and the source's headers are freed first, so the
  // run's peak holds one checkpoint's headers, not two.
  { const ConvertPlan done = std::move(plan); }
  { const Checkpoint closed = std::move(ck); }
  if (shard) {
    print_part_line(*shard, rep.shards_written, rep.shards, c.out, rep.seconds);
    return ok_status();
  }
  if (rep.already_complete) {
    fmt::print("{}: {} is already complete (same parameters); nothing to do\n",
               pass == ConvertPass::kMain ? "resume" : convert_pass_name(pass), c.out);
    return verify ? print_check_load(c.out, holds_main(c.out, pass)) : ok_status();
  }
  if (c.resume) fmt::print("resume: {} shard(s) reused from the earlier run\n", rep.reused_shards);
  const double gbps = rep.seconds > 0 ? static_cast<double>(rep.bytes_read) / rep.seconds / 1e9 : 0;
  fmt::print("wrote {} tensors ({}) in {} shard(s) to {} in {:.2f} s ({:.3f} GB/s of input)\n",
             rep.outputs, human_bytes(rep.bytes_written), rep.shards, c.out, rep.seconds, gbps);
  return verify ? print_check_load(c.out, holds_main(c.out, pass)) : ok_status();
}

}  // namespace

// Resumable runs and --shard workers write into OUT as they go (a worker locks its part
// file, which also creates OUT, since the workers share it); a plain run is staged.
Result<Destination> open_destination(const ConvertCli& c, const ShardTask* shard) {
  if (shard) {
    const std::string part = (std::filesystem::path(c.out) / part_file_name(*shard)).string();
    return Destination::open_shared(c.out, part);
  }
  const bool in_place = c.resume || c.mtp || c.indexer;
  QR_ASSIGN_OR_RETURN(d, Destination::open(c.out, in_place));
  std::error_code ec;
  if (in_place) std::filesystem::create_directories(c.out, ec);
  if (ec) {
    return Error(ErrorKind::kIoOpen, "cannot create directory: " + ec.message()).in_file(c.out);
  }
  return d;
}

Result<std::optional<ShardTask>> shard_task_of(const ConvertCli& c) {
  if (c.shard.empty()) return std::optional<ShardTask>();
  QR_ASSIGN_OR_RETURN(task, parse_shard_task(c.shard));
  if (c.resume) return Error(ErrorKind::kUsage, "--shard already resumes; drop --resume");
  return std::optional<ShardTask>(task);
}

void print_part_line(const ShardTask& s, std::size_t written, std::size_t total,
                     const std::string& out, double seconds) {
  fmt::print(
      "part {}/{}: wrote {} of the {} output file(s) to {} in {:.2f} s; run 'qrepack merge {}' "
      "when every part is done\n",
      s.index, s.count, written, total, out, seconds, out);
}

namespace {

// --mtp-only --base-container B: colibri-qwen36's, both or neither, B's scheme (none given
// here), and OUT a new directory that is not B.
Status check_mtp_only_flags(const ConvertCli& c) {
  const auto usage = [](std::string m) {
    return Error(ErrorKind::kUsage, std::move(m)).with_rule("qwen36.mtp_only");
  };
  if (!c.mtp_only || c.base_container.empty()) {
    return usage(
        "--mtp-only and --base-container B go together (the MTP head of SRC, written "
        "beside links to the colibri-qwen36 container B)");
  }
  if (!c.target.empty() && c.target != "colibri-qwen36") {
    return usage(fmt::format("--mtp-only is colibri-qwen36's, not --target {}", c.target));
  }
  if (!c.to.empty() || !c.bits.empty() || !c.down_group.empty()) {
    return usage(
        "--mtp-only quantizes the head as B's qwen36_meta.json says (ebits, expert_gs, "
        "expert_down_*): drop --to, --bits and --down-group");
  }
  std::error_code e1, e2;
  const auto out = std::filesystem::weakly_canonical(c.out, e1);
  const auto base = std::filesystem::weakly_canonical(c.base_container, e2);
  if (!e1 && !e2 && (out == base || out.string().starts_with(base.string() + "/"))) {
    return usage(
        fmt::format("-o {} is (inside) the base container {}, which --mtp-only never "
                    "writes",
                    c.out, c.base_container));
  }
  return ok_status();
}

}  // namespace

Status run_convert(const ConvertCli& c) {
  if (c.to == "e0m3-sfb") {  // an Omega pack, not a checkpoint
    if (!c.target.empty())
      return Error(ErrorKind::kUsage, "--target goes with checkpoints, not --to e0m3-sfb");
    return run_convert_engine(c, nullptr, nullptr);
  }
  if (is_gguf_source(c.source)) return run_convert_gguf(c);
  if (c.norm_topk_prob || c.qk_permuted) {
    return Error(ErrorKind::kUsage, "--norm-topk-prob and --qk-permuted go with GGUF sources");
  }
  if (c.mtp_only || !c.base_container.empty()) QR_TRY(check_mtp_only_flags(c));
  // --mtp-only reads the shards holding the head only: the trunk's need not be there.
  QR_ASSIGN_OR_RETURN(
      ck, c.mtp_only ? Checkpoint::open_holding(c.source, "mtp.") : Checkpoint::open(c.source));
  QR_ASSIGN_OR_RETURN(model_type, read_model_type(ck.directory()));
  if (model_type) QR_TRY(refuse_release_convert(*model_type));  // runs as downloaded
  QR_ASSIGN_OR_RETURN(t, resolve_target(c, model_type));
  if (t->id == TargetId::kColibriGlm || t->id == TargetId::kGeneric) {
    if (!c.down_group.empty()) {
      return Error(ErrorKind::kUsage, "--down-group goes with --target colibri-qwen36");
    }
    return run_convert_engine(c, &ck, t);
  }
  return run_convert_container(c, ck, *t);
}

namespace {

struct CheckLoadCli {
  std::string dir;
};

}  // namespace

Action add_convert(CLI::App& sub) {
  auto c = std::make_shared<ConvertCli>();
  sub.add_option("SRC", c->source,
                 "Source checkpoint: file, index, directory, hf://ORG/REPO[@REV] or https:// URL")
      ->required();
  sub.add_option("-o,--out", c->out, "Output directory (created; must not hold a checkpoint)")
      ->required();
  std::vector<std::string> target_choices;
  for (const Target& t : targets()) target_choices.emplace_back(t.name);
  std::vector<std::string> to_choices = scheme_names();
  to_choices.emplace_back("as-stored");
  to_choices.emplace_back("f16");
  with_choices(
      sub.add_option("--target", c->target,
                     "The container to write, as one engine runtime loads it: " + target_names() +
                         " (default: the runtime the engine's own 'coli convert' sends the "
                         "checkpoint's model_type to; generic writes the GLM-style container no "
                         "engine loads for other families)"),
      target_choices);
  sub.add_option("--down-group", c->down_group,
                 "colibri-qwen36 with --bits down=5..8: the down projection's group size "
                 "(default: per row)");
  with_choices(sub.add_option("--to", c->to,
                              "Scheme (default: the target's; colibri-glm int4-g128, int8-row "
                              "with --mtp or --indexer; as-stored = colibri-llama's staging; f16 = "
                              "colibri-qwen3's unquantized container): " +
                                  scheme_help()),
               to_choices);
  std::string container_bits;
  for (const Target& t : targets()) {
    if (t.id == TargetId::kColibriGlm || t.id == TargetId::kGeneric) continue;
    container_bits += fmt::format("; {}: {}", t.name,
                                  t.bits.empty() ? std::string("none") : std::string(t.flags));
  }
  sub.add_option("--bits", c->bits,
                 "Per-class bits for int schemes: experts, shared, attn, o_proj, kv_b, dense, io, "
                 "mtp, indexer, and the routed projections gate, up, down, each 2, 3, 4, 8 or 16 "
                 "(e.g. gate=4,up=4,down=8,io=16; 2 = int2-row, or int4 nibbles with qmax 1 under "
                 "a grouped scheme; 3 = int3-g64; 4 = the scheme's int4; 8 = int8-row; 16 = bf16; "
                 "defaults: the scheme's (int4 4, int2-row 2, int3-g64 3; io 8), int8-row 8); "
                 "experts=e8 (or gate=e8,up=e8,down=e8): E8/IQ3, engine fmt 6, for routed "
                 "experts whose input width is a multiple of 256. Container targets (qrepack "
                 "targets)" +
                     container_bits);
  sub.add_flag("--mtp", c->mtp,
               "Convert only the MTP head (layers >= num_hidden_layers) into OUT/out-mtp-*, beside "
               "a finished main conversion (or into an empty OUT); default --to int8-row");
  sub.add_flag("--indexer", c->indexer,
               "Convert only the DSA indexer weights of the main layers into OUT/out-idx-*, "
               "beside a finished main conversion; default --to int8-row");
  sub.add_option("--select", c->select, "Only convert weights whose name matches this regex");
  sub.add_option("--drop", c->drop, "Drop weights whose name matches this regex (recorded)");
  sub.add_flag("--keep-unknown", c->keep_unknown, "Copy tensors no rule claims unchanged");
  sub.add_flag("--keep-mtp", c->keep_mtp,
               "Keep the MTP layer's tensors as stored (float or fp8-block)");
  sub.add_flag("--keep-indexer", c->keep_indexer,
               "Keep DSA indexer tensors as stored (float or fp8-block)");
  sub.add_flag("--unfuse-experts", c->unfuse,
               "With --to bf16: only split fused experts, copying every tensor bitwise");
  sub.add_flag("--no-coverage-gate", c->no_coverage,
               "Convert without config.json's list of tensors the engine loads");
  sub.add_option("--max-shard-size", c->max_shard_size, "Largest output shard (default 5GB)");
  with_choices(sub.add_option("--fold", c->fold,
                              "e0m3-sfb: none (default, production), mean or actnorm (see "
                              "docs/formats/omega-e0m3.md)"),
               table_names(kFolds));
  sub.add_option("--expected-records", c->expected_records,
                 "e0m3-sfb: record count to require (default 252)");
  sub.add_flag("--keep-fp16", c->keep_fp16,
               "e0m3-sfb: also store the fp16 weight that was quantized");
  sub.add_flag("--act-out-scale-tensor", c->act_out_scale_tensor,
               "e0m3-sfb --fold actnorm: store act_out_scale as a 0-d float32 tensor (torch "
               "1.13's weights_only loader) instead of the Python float FlashRT writes");
  with_choices(sub.add_option("--format", c->format,
                              "e0m3-sfb: pt (default; the torch .pt FlashRT loads) or safetensors"),
               table_names(kFormats));
  add_threads_option(sub, c->threads);
  sub.add_option("--job-size", c->job_size,
                 "Work unit per thread, in bytes of decoded f32 (memory ~ 3 x threads x this); "
                 "never changes the output (default 8MiB)");
  sub.add_flag("--progress", c->progress,
               "Show the progress line even when stderr is not a terminal");
  sub.add_option("--shard", c->shard,
                 "I/N: be worker I (0-based) of N; writes a deterministic, byte-balanced subset "
                 "of the output shards (see 'qrepack merge')");
  sub.add_flag("--dry-run", c->dry_run,
               "Print the plan, the output's size and the disk it needs, then stop: no tensor "
               "data is read and nothing is written (a remote source is not downloaded)");
  sub.add_flag("--norm-topk-prob", c->norm_topk_prob,
               "GGUF source: write norm_topk_prob true in config.json (GGUF does not carry it; "
               "default false, as the official OLMoE checkpoints)");
  sub.add_flag("--qk-permuted", c->qk_permuted,
               "GGUF source: put attn_q / attn_k rows back from llama.cpp's RoPE permutation");
  sub.add_flag("--mtp-only", c->mtp_only,
               "colibri-qwen36: convert only SRC's MTP head (mtp.*) into OUT, in the scheme of "
               "--base-container B, with OUT's other files linking to B's (B is never written; "
               "SRC's trunk shards need not exist)");
  sub.add_option("--base-container", c->base_container,
                 "With --mtp-only: the colibri-qwen36 container the head goes beside");
  sub.add_flag("--resume", c->resume,
               "Publish shards as they complete and, on a rerun, reuse those whose checksums "
               "still match (same flags required)");
  return [c] {
    set_thread_count(c->threads);
    return run_convert(*c);
  };
}

Action add_check_load(CLI::App& sub) {
  auto c = std::make_shared<CheckLoadCli>();
  sub.add_option("DIR", c->dir, "Converted checkpoint directory (with config.json)")->required();
  return [c]() -> Status {
    // A container target's directory is checked as its own runtime loads it.
    QR_ASSIGN_OR_RETURN(recorded, recorded_target(c->dir));
    if (recorded && recorded->id != TargetId::kColibriGlm && recorded->id != TargetId::kGeneric) {
      return print_target_check(c->dir, *recorded);
    }
    // A vendor directory of a family the engine runs as downloaded: checked as its runtime
    // loads it.
    bool handled = false;
    if (!recorded) QR_TRY(release_check_load(c->dir, handled));
    if (handled) return ok_status();
    return print_check_load(c->dir);
  };
}

}  // namespace qrepack::cli
