// `qrepack convert --target colibri-qwen36|colibri-qwen3|colibri-llama|colibri-olmoe`: the
// container one engine runtime loads, planned by the target (targets/container.h), written
// into a staged directory, published atomically and check-loaded as that runtime loads it.
#include <fmt/format.h>

#include <filesystem>

#include "cli/convert_cli.h"
#include "cli/destination.h"
#include "cli/dry_run.h"
#include "cli/format.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/exec/container_exec.h"
#include "qrepack/io/output_guard.h"
#include "qrepack/targets/check_load.h"
#include "qrepack/targets/container.h"
#include "remote/paths.h"

namespace qrepack::cli {
namespace {

// The GLM-style flags no container target takes, named in the refusal.
Status refuse_glm_flags(const ConvertCli& c, const Target& t) {
  std::vector<std::string> bad;
  if (c.mtp) bad.emplace_back("--mtp");
  if (c.indexer) bad.emplace_back("--indexer");
  glm_layout_flags(c, bad);
  if (bad.empty()) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("--target {} writes {}'s own layout and takes none of {} (its "
                           "contract names every tensor; its files are split as the runtime "
                           "loads them)",
                           t.name, t.runtime, fmt::join(bad, ", ")))
      .with_rule("target.flags");
}

// --bits NAME=N for a container target: the names its row in the target table lists, 2..8
// each, once.
Status parse_container_bits(const std::string& text, const Target& t, ContainerOptions& o) {
  if (text.empty()) return ok_status();
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (val == "e8") {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits {}=e8: E8/IQ3 (fmt 6) is written for --target colibri-glm "
                               "only, as the engine's converters do",
                               key));
    }
    if (val.size() != 1 || val[0] < '2' || val[0] > '8') {
      return Error(ErrorKind::kUsage, fmt::format("--bits {}: \"{}\" is not 2..8", key, val));
    }
    const int b = val[0] - '0';
    int* slot = key == "experts" ? &o.expert_bits
                : key == "down"  ? &o.down_bits
                : key == "attn"  ? &o.attn_bits
                : key == "mla"   ? &o.mla_bits
                : key == "head"  ? &o.head_bits
                                 : nullptr;
    if (!slot || !target_takes_bits(t, key)) {
      return Error(ErrorKind::kUsage,
                   t.bits.empty() ? fmt::format("--target {} takes no --bits (it writes {})",
                                                t.name, t.schemes)
                                  : fmt::format("--bits \"{}\": --target {} takes {}",
                                                key.substr(0, 32), t.name, t.flags))
          .with_rule("target.scheme");
    }
    if (*slot != 0) {
      return Error(ErrorKind::kUsage, fmt::format("--bits {} is given twice", key));
    }
    *slot = b;
    at = end + 1;
  }
  return ok_status();
}

}  // namespace

void glm_layout_flags(const ConvertCli& c, std::vector<std::string>& bad) {
  if (!c.select.empty()) bad.emplace_back("--select");
  if (!c.drop.empty()) bad.emplace_back("--drop");
  if (c.keep_unknown) bad.emplace_back("--keep-unknown");
  if (c.keep_mtp) bad.emplace_back("--keep-mtp");
  if (c.keep_indexer) bad.emplace_back("--keep-indexer");
  if (c.unfuse) bad.emplace_back("--unfuse-experts");
  if (c.no_coverage) bad.emplace_back("--no-coverage-gate");
  if (!c.max_shard_size.empty()) bad.emplace_back("--max-shard-size");
  if (!c.fold.empty() || c.expected_records || c.keep_fp16 || c.act_out_scale_tensor ||
      !c.format.empty()) {
    bad.emplace_back("the e0m3-sfb options");
  }
}

Status report_file_run(const ConvertCli& c, const ShardTask* shard, const ContainerReport& rep,
                       const std::string& wrote, const Target& t) {
  if (shard) {
    print_part_line(*shard, rep.files_written, rep.files, c.out, rep.seconds);
    return ok_status();
  }
  if (rep.already_complete) {
    fmt::print("resume: {} is already complete (same parameters); nothing to do\n", c.out);
  } else {
    if (c.resume) fmt::print("resume: {} file(s) reused from the earlier run\n", rep.reused_files);
    fmt::print("{}\n", wrote);
  }
  return print_target_check(c.out, t);
}

Status print_target_check(const std::string& dir, const Target& t) {
  QR_ASSIGN_OR_RETURN(r, check_load_target(dir, t));
  fmt::print("check-load ({}): {} missing tensors, {} unloadable ({} checked)\n", t.runtime,
             r.missing.size(), r.unloadable.size(), r.checked);
  for (const auto& m : r.missing) fmt::print("  missing {}\n", m);
  for (const auto& u : r.unloadable) fmt::print("  unloadable {}\n", u);
  if (!r.ok()) {
    return Error(ErrorKind::kVerificationFailed, fmt::format("{} missing and {} unloadable tensors",
                                                             r.missing.size(), r.unloadable.size()))
        .in_file(dir)
        .with_rule("check_load");
  }
  return ok_status();
}

Result<const Target*> resolve_target(const ConvertCli& c,
                                     const std::optional<std::string>& model_type) {
  if (!c.target.empty()) {
    QR_ASSIGN_OR_RETURN(t, target_by_name(c.target));
    if (t->id == TargetId::kGeneric) return t;
    if (!model_type) {
      return Error(ErrorKind::kInvalidConfig,
                   fmt::format("--target {} needs config.json's model_type", t->name))
          .with_rule("target.config");
    }
    if (!target_accepts(*t, *model_type)) {
      const Target* d = default_target(*model_type);
      return Error(
                 ErrorKind::kUsage,
                 fmt::format(
                     "--target {} ({}) converts model_type {}, not \"{}\"; {}", t->name, t->runtime,
                     fmt::join(t->model_types, ", "), model_type->substr(0, 64),
                     d ? fmt::format("its engine runtime is {} (--target {})", d->runtime, d->name)
                       : std::string("no engine runtime loads it (--target generic "
                                     "writes the GLM-style container anyway)")))
          .with_rule("target.family");
    }
    return t;
  }
  if (!model_type) return &target(TargetId::kGeneric);  // no config: name rules alone
  if (const Target* d = default_target(*model_type)) return d;
  if (const Family* f = family_for_model_type(*model_type)) {
    return Error(ErrorKind::kUnloadableLayout,
                 fmt::format("model_type \"{}\" ({}): no engine runtime loads a container of "
                             "this family (the GLM runtime needs MLA with n_group 1 and a DSA "
                             "indexer; targets: {}); pass --target generic to write the "
                             "GLM-style container anyway",
                             model_type->substr(0, 64), f->title, target_names()))
        .with_rule("target.no_reader");
  }
  return &target(TargetId::kGeneric);  // an unknown family: plan_conversion says so
}

Status run_convert_container(const ConvertCli& c, const Checkpoint& ck, const Target& t) {
  QR_TRY(refuse_glm_flags(c, t));
  ContainerOptions o;
  o.scheme = c.to.empty() ? std::string(t.default_scheme) : c.to;
  // --mtp-only quantizes as the base container's meta says (no --to was taken).
  if (c.mtp_only) o.scheme = "base-container";
  QR_TRY(parse_container_bits(c.bits, t, o));
  if (!c.down_group.empty()) {
    if (t.flags.find("--down-group") == std::string_view::npos) {
      return Error(
                 ErrorKind::kUsage,
                 fmt::format("--target {} takes no --down-group (it is colibri-qwen36's)", t.name))
          .with_rule("target.scheme");
    }
    const auto g = parse_size(c.down_group);
    if (!g.ok() || *g == 0) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--down-group \"{}\" is not a positive count", c.down_group));
    }
    o.down_group = *g;
  }
  if (c.mtp_only) {  // absolute: recorded for --resume and merge, linked to from OUT
    std::error_code ec;
    o.mtp_base = std::filesystem::weakly_canonical(c.base_container, ec).string();
    if (ec) o.mtp_base = c.base_container;
  }
  QR_ASSIGN_OR_RETURN(job, parse_size(c.job_size.empty() ? "8MiB" : c.job_size));
  if (job == 0) return Error(ErrorKind::kUsage, "--job-size must be positive");
  o.job_bytes = job;
  QR_TRY(ensure_output_dir_is_not_input_dir(c.out, ck.files()));
  QR_ASSIGN_OR_RETURN(plan, plan_container(ck, t, o));
  if (c.mtp_only) {
    fmt::print(
        "PLAN: target {} (runtime {}, as {} writes it), the MTP head only, in the scheme "
        "of {} -> {}/\n",
        t.name, t.runtime, t.tool, c.base_container, c.out);
  } else {
    fmt::print("PLAN: target {} (runtime {}, as {} writes it), --to {} -> {}/\n", t.name, t.runtime,
               t.tool, o.scheme, c.out);
  }
  fmt::print("family: {}, model_type {}; every tensor named by the {} contract\n", plan.family,
             plan.model_type, t.name);
  for (const auto& [k, n] : plan.counts) fmt::print("  {:<40} {:>6}\n", k, n);
  for (const auto& f : plan.side_files) {
    if (f.copy_from.empty() && f.link_to.empty()) fmt::print("  writes {}\n", f.name);
  }
  if (c.dry_run) return print_dry_run(ck, plan, c.out);
  QR_ASSIGN_OR_RETURN(shard, shard_task_of(c));
  // A plain run builds OUT beside it and renames it into place at the end; --resume and the
  // workers of --shard write into OUT as they go.
  QR_ASSIGN_OR_RETURN(destination, open_destination(c, shard ? &*shard : nullptr));
  ContainerRun run{c.resume, shard ? &*shard : nullptr};
  QR_ASSIGN_OR_RETURN(rep, write_container(ck, plan, o, destination.write_dir(), run));
  QR_TRY(remote::verify_opened_files(shard.has_value()));  // nothing published from bad bytes
  QR_TRY(destination.commit());
  const double gbps = rep.seconds > 0 ? static_cast<double>(rep.bytes_read) / rep.seconds / 1e9 : 0;
  return report_file_run(
      c, shard ? &*shard : nullptr, rep,
      fmt::format("wrote {} tensors ({}) in {} file(s) to {} in {:.2f} s ({:.3f} GB/s of input){}",
                  rep.tensors, human_bytes(rep.bytes_written), rep.files, c.out, rep.seconds, gbps,
                  rep.hard_linked ? fmt::format("; {} shard(s) hard-linked", rep.hard_linked) : ""),
      t);
}

}  // namespace qrepack::cli
