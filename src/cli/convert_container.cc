// `qrepack convert --target colibri-qwen36|colibri-qwen3|colibri-llama|colibri-olmoe`: the
// container one engine runtime loads, planned by the target (targets/container.h), written
// into a staged directory, published atomically and check-loaded as that runtime loads it.
#include <fmt/format.h>

#include "cli/convert_cli.h"
#include "cli/destination.h"
#include "cli/dry_run.h"
#include "cli/format.h"
#include "qrepack/checkpoint/family.h"
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
  if (!c.select.empty()) bad.emplace_back("--select");
  if (!c.drop.empty()) bad.emplace_back("--drop");
  if (c.keep_unknown) bad.emplace_back("--keep-unknown");
  if (c.keep_mtp) bad.emplace_back("--keep-mtp");
  if (c.keep_indexer) bad.emplace_back("--keep-indexer");
  if (c.unfuse) bad.emplace_back("--unfuse-experts");
  if (c.no_coverage) bad.emplace_back("--no-coverage-gate");
  if (c.resume) bad.emplace_back("--resume");
  if (!c.shard.empty()) bad.emplace_back("--shard");
  if (!c.max_shard_size.empty()) bad.emplace_back("--max-shard-size");
  if (!c.fold.empty() || c.expected_records || c.keep_fp16 || c.act_out_scale_tensor ||
      !c.format.empty()) {
    bad.emplace_back("the e0m3-sfb options");
  }
  if (bad.empty()) return ok_status();
  return Error(ErrorKind::kUsage,
               fmt::format("--target {} writes {}'s own layout and takes none of {} (its "
                           "contract names every tensor; its files are split as the runtime "
                           "loads them)",
                           t.name, t.runtime, fmt::join(bad, ", ")))
      .with_rule("target.flags");
}

// --bits experts=N,down=N for the container targets (2..8 each).
Status parse_container_bits(const std::string& text, ContainerOptions& o) {
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
    if (key == "experts" && o.expert_bits == 0) {
      o.expert_bits = b;
    } else if (key == "down" && o.down_bits == 0) {
      o.down_bits = b;
    } else if (key == "attn" && o.attn_bits == 0) {
      o.attn_bits = b;
    } else if (key == "mla" && o.mla_bits == 0) {
      o.mla_bits = b;
    } else if (key == "head" && o.head_bits == 0) {
      o.head_bits = b;
    } else {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits \"{}\": container targets take experts=N, down=N, attn=N, "
                               "mla=N and head=N, each once",
                               key));
    }
    at = end + 1;
  }
  return ok_status();
}

}  // namespace

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
  QR_TRY(parse_container_bits(c.bits, o));
  if (o.attn_bits && t.id != TargetId::kColibriInklingDense) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--bits attn=N is for --target colibri-inkling-dense, not {}", t.name))
        .with_rule("target.scheme");
  }
  if ((o.mla_bits || o.head_bits) && t.id != TargetId::kColibriKimiK3) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--bits mla=N / head=N are for --target colibri-kimi-k3, not {}",
                             t.name))
        .with_rule("target.scheme");
  }
  if (!c.down_group.empty()) {
    const auto g = parse_size(c.down_group);
    if (!g.ok() || *g == 0) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--down-group \"{}\" is not a positive count", c.down_group));
    }
    o.down_group = *g;
  }
  QR_ASSIGN_OR_RETURN(job, parse_size(c.job_size.empty() ? "8MiB" : c.job_size));
  if (job == 0) return Error(ErrorKind::kUsage, "--job-size must be positive");
  o.job_bytes = job;
  QR_TRY(ensure_output_dir_is_not_input_dir(c.out, ck.files()));
  QR_ASSIGN_OR_RETURN(plan, plan_container(ck, t, o));
  fmt::print("PLAN: target {} (runtime {}, as {} writes it), --to {} -> {}/\n", t.name, t.runtime,
             t.tool, o.scheme, c.out);
  fmt::print("family: {}, model_type {}; every tensor named by the {} contract\n", plan.family,
             plan.model_type, t.name);
  for (const auto& [k, n] : plan.counts) fmt::print("  {:<40} {:>6}\n", k, n);
  for (const auto& f : plan.side_files) {
    if (f.copy_from.empty()) fmt::print("  writes {}\n", f.name);
  }
  if (c.dry_run) return print_dry_run(ck, plan, c.out);
  QR_ASSIGN_OR_RETURN(destination, Destination::open(c.out, false));
  QR_ASSIGN_OR_RETURN(rep, write_container(ck, plan, o, destination.write_dir()));
  QR_TRY(remote::verify_opened_files());  // nothing published from bytes failing their hash
  QR_TRY(destination.commit());
  const double gbps = rep.seconds > 0 ? static_cast<double>(rep.bytes_read) / rep.seconds / 1e9 : 0;
  fmt::print("wrote {} tensors ({}) in {} file(s) to {} in {:.2f} s ({:.3f} GB/s of input){}\n",
             rep.tensors, human_bytes(rep.bytes_written), rep.files, c.out, rep.seconds, gbps,
             rep.hard_linked ? fmt::format("; {} shard(s) hard-linked", rep.hard_linked) : "");
  return print_target_check(c.out, t);
}

}  // namespace qrepack::cli
