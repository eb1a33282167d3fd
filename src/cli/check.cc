// `qrepack check PACK`: E0M3 fidelity of an Omega layer on the CPU (emulate mode), or of a
// converted artifact's stored bytes (--artifact, gated by --min-artifact-cos -> exit 1).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.h"
#include "cli/docgen.h"
#include "cli/format.h"
#include "qrepack/omega/e0m3_check.h"
#include "qrepack/omega/pack_validate.h"

namespace qrepack::cli {
namespace {

struct CheckCli {
  std::string pack, mode = "emulate", artifact, layers;
  CheckOptions o;
  double min_cos = 0.98;
  bool min_cos_given = false, layer_given = false, json = false, all = false, progress = false;
};

// A MIP-QAT checkpoint (safetensors) instead of an Omega pack.
bool is_qat_source(const std::string& path) { return path.ends_with(".safetensors"); }

// The schema fields an artifact lacks (FlashRT's PR #179 and QAT converters write none), said
// once before the report: its layers are then checked by their tensors alone.
void print_missing_metadata(const CheckCli& c, const TorchFile& art) {
  const auto missing = e0m3_artifact_missing_metadata(art);
  if (missing.empty() || c.json) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  fmt::print(
      "note: the artifact lacks {} (as FlashRT's PR #179 and QAT converters write it); its "
      "layers are checked by their tensors\n",
      list);
}

void add_missing_metadata(nlohmann::ordered_json& j, const TorchFile* art) {
  if (!art) return;
  j["missing_metadata"] = e0m3_artifact_missing_metadata(*art);
}

nlohmann::ordered_json report_json(const LayerCheck& r, const CheckCli& c) {
  nlohmann::ordered_json j = {
      {"layer", r.layer},     {"N", r.n},         {"K", r.k},        {"T", r.steps},
      {"tokens", c.o.tokens}, {"step", c.o.step}, {"seed", c.o.seed}};
  for (const auto& row : r.rows) {
    j["variants"].push_back({{"variant", row.variant},
                             {"global_cos", row.cos.global},
                             {"token_cos_mean", row.cos.token_mean},
                             {"token_cos_min", row.cos.token_min}});
  }
  if (r.artifact_byte_diffs) j["artifact_bytes_differing_from_pack"] = *r.artifact_byte_diffs;
  return j;
}

void print_report(const LayerCheck& r, const CheckCli& c, const TorchFile* art = nullptr) {
  if (c.json) {
    auto j = report_json(r, c);
    add_missing_metadata(j, art);
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (r.steps == 0) {  // a QAT checkpoint's layer: no act_scale_table, so no T and no step
    fmt::print("layer {} (N={}, K={}); {} synthetic tokens, seed {}\n", r.layer, r.n, r.k,
               c.o.tokens, c.o.seed);
  } else {
    fmt::print("layer {} (N={}, K={}, T={}); {} synthetic tokens, step {}, seed {}\n", r.layer, r.n,
               r.k, r.steps, c.o.tokens, c.o.step, c.o.seed);
  }
  Table t({"candidate vs y_fp = x2 W^T", "global cos", "token cos mean", "token cos min"},
          {false, true, true, true});
  for (const auto& row : r.rows) {
    t.add({row.variant, fmt::format("{:.6f}", row.cos.global),
           fmt::format("{:.6f}", row.cos.token_mean), fmt::format("{:.6f}", row.cos.token_min)});
  }
  t.print(stdout);
  if (r.artifact_byte_diffs) {
    if (*r.artifact_byte_diffs == 0) {
      fmt::print("stored packed + sfb bytes are identical to qrepack's E0M3 of the source\n");
    } else {
      fmt::print("stored packed + sfb bytes differ from qrepack's E0M3 of the source in {} bytes\n",
                 *r.artifact_byte_diffs);
    }
  }
}

// The first word of a variant ("omega", "S0", "S1", "artifact"): a table column.
std::string short_name(const std::string& variant) { return variant.substr(0, variant.find(' ')); }

Status gate_artifact(const CheckCli& c, const LayerCheck& r) {
  const double cos = r.rows.front().cos.global;
  if (!(cos >= c.min_cos)) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("layer '{}': global cosine {:.6f} of the artifact's GEMM is below "
                             "--min-artifact-cos {}",
                             r.layer, cos, c.min_cos))
        .in_file(c.artifact)
        .with_rule("omega.min_artifact_cos");
  }
  return ok_status();
}

using CheckOne = std::function<Result<LayerCheck>(const CheckOptions&)>;

// The layers --all / --layers choose, already validated: the pack's records, or a QAT
// artifact's layers (the checkpoint's weights it was made from).
Result<std::vector<std::string>> layers_to_check(const CheckCli& c, const TorchFile* pack,
                                                 const TorchFile* art) {
  std::optional<NamePattern> select;
  if (!c.layers.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(c.layers, "--layers"));
    select = std::move(re);
  }
  if (pack) {
    PackValidateOptions vo;
    vo.select = select;
    QR_ASSIGN_OR_RETURN(v, validate_omega_pack(*pack, vo));
    return v.records;
  }
  std::vector<std::string> names;
  for (const auto& [k, v] : std::get<PtDict>(art->root().get("weights")->v)) {
    if (!k->is_string()) continue;
    const std::string& name = std::get<std::string>(k->v);
    if (!select || select->search(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return Error(ErrorKind::kRecordCount, "no artifact layers matched --layers")
        .in_file(art->path());
  }
  return names;
}

// check --all / --layers: every selected layer, one table row (or JSON object) each, a
// progress line on stderr; memory is one layer's at a time.
Status run_check_many(const CheckCli& c, const std::vector<std::string>& layers,
                      const TorchFile* art, const CheckOne& check_one) {
  const bool show = c.progress || ::isatty(STDERR_FILENO) == 1;
  std::vector<LayerCheck> reports;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (show) {
      fmt::print(stderr, "\r\x1b[Kcheck {}/{} {}", i + 1, layers.size(), layers[i]);
      std::fflush(stderr);
    }
    CheckOptions o = c.o;
    o.layer = layers[i];
    o.artifact_validated = true;
    auto r = check_one(o);
    if (!r.ok()) return std::move(r.error());
    reports.push_back(std::move(r).value());
  }
  if (show) fmt::print(stderr, "\r\x1b[K");
  std::map<std::string, double> worst;
  for (const auto& r : reports) {
    for (const auto& row : r.rows) {
      const std::string k = short_name(row.variant);
      worst[k] = worst.contains(k) ? std::min(worst[k], row.cos.global) : row.cos.global;
    }
  }
  if (c.json) {
    nlohmann::ordered_json j;
    j["layers"] = nlohmann::json::array();
    for (const auto& r : reports) j["layers"].push_back(report_json(r, c));
    j["min_global_cos"] = worst;
    add_missing_metadata(j, art);
    fmt::print("{}\n", j.dump(2));
  } else if (!reports.empty()) {
    std::vector<std::string> head = {"layer", "N", "K"};
    for (const auto& row : reports[0].rows) head.push_back(short_name(row.variant) + " cos");
    std::vector<bool> right(head.size(), true);
    right[0] = false;
    Table t(head, right);
    for (const auto& r : reports) {
      std::vector<std::string> cells = {r.layer, std::to_string(r.n), std::to_string(r.k)};
      for (const auto& row : r.rows) cells.push_back(fmt::format("{:.6f}", row.cos.global));
      t.add(std::move(cells));
    }
    t.print(stdout);
    fmt::print(
        "{} layer(s); global cosine against y_fp = x2 W^T, {} synthetic tokens each; "
        "lowest:",
        reports.size(), c.o.tokens);
    for (const auto& [k, w] : worst) fmt::print(" {} {:.6f}", k, w);
    fmt::print("\n");
  }
  if (art) {
    std::size_t failed = 0;
    const LayerCheck* first = nullptr;
    for (const auto& r : reports) {
      if (!gate_artifact(c, r).ok()) {
        ++failed;
        if (!first) first = &r;
      }
    }
    if (first) {
      return Error(ErrorKind::kVerificationFailed,
                   fmt::format("{} of {} layer(s) below --min-artifact-cos {}, first '{}' at "
                               "{:.6f}",
                               failed, reports.size(), c.min_cos, first->layer,
                               first->rows.front().cos.global))
          .in_file(c.artifact)
          .with_rule("omega.min_artifact_cos");
    }
    if (!c.json) fmt::print("gate: every global cosine >= {}: pass\n", c.min_cos);
  }
  return ok_status();
}

// check CKPT.safetensors --artifact A: a QAT artifact against the checkpoint it came from.
Status run_check_qat(const CheckCli& c) {
  if (c.artifact.empty()) {
    return Error(ErrorKind::kUsage,
                 "a safetensors source is a QAT checkpoint: pass --artifact A to check the "
                 "artifact converted from it (emulate mode needs an Omega pack)");
  }
  if (c.o.s1) return Error(ErrorKind::kUsage, "--s1 needs an Omega pack's scale table");
  QR_ASSIGN_OR_RETURN(ck, SafetensorsFile::open(c.pack));
  QR_ASSIGN_OR_RETURN(art, TorchFile::open(c.artifact));
  QR_TRY(validate_qat_artifact(art, ck));
  print_missing_metadata(c, art);
  const auto one = [&](const CheckOptions& o) { return check_layer_qat_artifact(ck, art, o); };
  if (c.all || !c.layers.empty()) {
    QR_ASSIGN_OR_RETURN(layers, layers_to_check(c, nullptr, &art));
    return run_check_many(c, layers, &art, one);
  }
  CheckOptions o = c.o;
  o.artifact_validated = true;
  QR_ASSIGN_OR_RETURN(r, one(o));
  print_report(r, c, &art);
  QR_TRY(gate_artifact(c, r));
  if (!c.json) {
    fmt::print("gate: global cosine {:.6f} >= {}: pass\n", r.rows.front().cos.global, c.min_cos);
  }
  return ok_status();
}

Status run_check(const CheckCli& c) {
  if (c.mode == "kernel") {
    return Error(ErrorKind::kUsage,
                 "--mode kernel runs FlashRT's CUDA kernels and needs a GPU; qrepack's emulate "
                 "mode uses the same bit-exact quantizer on the CPU");
  }
  if (c.mode != "emulate") {
    return Error(ErrorKind::kUsage, fmt::format("--mode must be emulate, got \"{}\"", c.mode));
  }
  if (c.o.emulate_flashrt && !c.artifact.empty()) {
    return Error(ErrorKind::kUsage,
                 "--emulate-flashrt reproduces the reference checker's emulate mode; an "
                 "--artifact check computes from the stored bytes only");
  }
  if (c.min_cos_given && c.artifact.empty()) {
    return Error(ErrorKind::kUsage, "--min-artifact-cos goes with --artifact");
  }
  if (!(c.min_cos >= -1.0 && c.min_cos <= 1.0)) {
    return Error(ErrorKind::kUsage, "--min-artifact-cos must be within [-1, 1]");
  }
  if (c.all && !c.layers.empty()) {
    return Error(ErrorKind::kUsage, "--all and --layers choose the layers two ways; pass one");
  }
  if ((c.all || !c.layers.empty()) && c.layer_given) {
    return Error(ErrorKind::kUsage, "--layer checks one record; --all and --layers check many");
  }
  if (is_qat_source(c.pack)) return run_check_qat(c);
  QR_ASSIGN_OR_RETURN(pack, TorchFile::open(c.pack));
  std::optional<TorchFile> art;
  if (!c.artifact.empty()) {
    QR_ASSIGN_OR_RETURN(a, TorchFile::open(c.artifact));
    art = std::move(a);
  }
  const TorchFile* ap = art ? &*art : nullptr;
  if (c.all || !c.layers.empty()) {
    QR_ASSIGN_OR_RETURN(layers, layers_to_check(c, &pack, ap));
    if (ap) {
      QR_TRY(validate_e0m3_artifact(*ap, pack));
      print_missing_metadata(c, *ap);
    }
    return run_check_many(c, layers, ap, [&](const CheckOptions& o) {
      return ap ? check_layer_artifact(pack, *ap, o) : check_layer_emulate(pack, o);
    });
  }
  if (!ap) {
    QR_ASSIGN_OR_RETURN(r, check_layer_emulate(pack, c.o));
    print_report(r, c);
    return ok_status();
  }
  QR_ASSIGN_OR_RETURN(r, check_layer_artifact(pack, *ap, c.o));
  print_missing_metadata(c, *ap);
  print_report(r, c, ap);
  QR_TRY(gate_artifact(c, r));
  if (!c.json) {
    fmt::print("gate: global cosine {:.6f} >= {}: pass\n", r.rows.front().cos.global, c.min_cos);
  }
  return ok_status();
}

}  // namespace

Action add_check(CLI::App& sub) {
  auto c = std::make_shared<CheckCli>();
  sub.add_option("pack", c->pack,
                 "dit_svdquant_v1 pack (.pt), or the MIP-QAT checkpoint (.safetensors) a QAT "
                 "--artifact was converted from")
      ->required();
  with_choices(
      sub.add_option("--mode", c->mode, "emulate (the CPU, bit-exact E0M3)")->capture_default_str(),
      {"emulate"});
  sub.add_option("--layer", c->o.layer, "Record to check")
      ->capture_default_str()
      ->each([c](const std::string&) { c->layer_given = true; });
  sub.add_option("--tokens", c->o.tokens, "Synthetic activation rows")->capture_default_str();
  sub.add_option("--step", c->o.step, "act_scale_table row used as s_t")->capture_default_str();
  sub.add_option("--seed", c->o.seed, "Seed of the activation generator")->capture_default_str();
  sub.add_flag("--s1", c->o.s1, "Also measure S1 (mean fold: e0m3(x2/s_t) x e0m3(W*mean s))");
  sub.add_flag("--emulate-flashrt", c->o.emulate_flashrt,
               "Also report S0 (and S1 with --s1) as FlashRT's checker emulates them (its UE4M3 "
               "rounding keeps scales at 2^e or 1.125*2^e, clamps at 480, floors at 2^-9), to "
               "compare with a report made by that checker");
  sub.add_option("--artifact", c->artifact,
                 "omega_e0m3_v1 artifact: validate it against the pack and compute the GEMM "
                 "from its stored packed + sfb bytes");
  sub.add_option("--min-artifact-cos", c->min_cos, "Gate on the artifact's global cosine")
      ->capture_default_str()
      ->each([c](const std::string&) { c->min_cos_given = true; });
  sub.add_flag("--all", c->all,
               "Every record of the pack: one row each (with --artifact, every layer's GEMM "
               "from its stored bytes, gated)");
  sub.add_option("--layers", c->layers, "The records whose name matches this regex (RE2)");
  sub.add_flag("--progress", c->progress,
               "Show the progress line of --all / --layers even when stderr is not a terminal");
  sub.add_flag("--json", c->json, "Print the report as JSON");
  return [c]() { return run_check(*c); };
}

}  // namespace qrepack::cli
