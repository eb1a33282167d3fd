// `qrepack check PACK`: E0M3 fidelity of an Omega layer on the CPU (emulate mode), or of a
// converted artifact's stored bytes (--artifact, gated by --min-artifact-cos -> exit 1).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/format.h"
#include "qrepack/omega/e0m3_check.h"

namespace qrepack::cli {
namespace {

struct CheckCli {
  std::string pack, mode = "emulate", artifact;
  CheckOptions o;
  double min_cos = 0.98;
  bool min_cos_given = false, json = false;
};

void print_report(const LayerCheck& r, const CheckCli& c) {
  if (c.json) {
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
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("layer {} (N={}, K={}, T={}); {} synthetic tokens, step {}, seed {}\n", r.layer, r.n,
             r.k, r.steps, c.o.tokens, c.o.step, c.o.seed);
  Table t({"candidate vs y_fp = x2 W^T", "global cos", "token cos mean", "token cos min"},
          {false, true, true, true});
  for (const auto& row : r.rows) {
    t.add({row.variant, fmt::format("{:.6f}", row.cos.global),
           fmt::format("{:.6f}", row.cos.token_mean), fmt::format("{:.6f}", row.cos.token_min)});
  }
  t.print(stdout);
  if (r.artifact_byte_diffs) {
    if (*r.artifact_byte_diffs == 0) {
      fmt::print("stored packed + sfb bytes are identical to qrepack's E0M3 of this pack\n");
    } else {
      fmt::print("stored packed + sfb bytes differ from qrepack's E0M3 of this pack in {} bytes\n",
                 *r.artifact_byte_diffs);
    }
  }
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
  if (c.min_cos_given && c.artifact.empty()) {
    return Error(ErrorKind::kUsage, "--min-artifact-cos goes with --artifact");
  }
  if (!(c.min_cos >= -1.0 && c.min_cos <= 1.0)) {
    return Error(ErrorKind::kUsage, "--min-artifact-cos must be within [-1, 1]");
  }
  QR_ASSIGN_OR_RETURN(pack, TorchFile::open(c.pack));
  if (c.artifact.empty()) {
    QR_ASSIGN_OR_RETURN(r, check_layer_emulate(pack, c.o));
    print_report(r, c);
    return ok_status();
  }
  QR_ASSIGN_OR_RETURN(art, TorchFile::open(c.artifact));
  QR_ASSIGN_OR_RETURN(r, check_layer_artifact(pack, art, c.o));
  print_report(r, c);
  const double cos = r.rows.front().cos.global;
  if (!(cos >= c.min_cos)) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("layer '{}': global cosine {:.6f} of the artifact's GEMM is below "
                             "--min-artifact-cos {}",
                             r.layer, cos, c.min_cos))
        .in_file(c.artifact)
        .with_rule("omega.min_artifact_cos");
  }
  if (!c.json) fmt::print("gate: global cosine {:.6f} >= {}: pass\n", cos, c.min_cos);
  return ok_status();
}

}  // namespace

Action add_check(CLI::App& sub) {
  auto c = std::make_shared<CheckCli>();
  sub.add_option("pack", c->pack, "dit_svdquant_v1 pack (.pt)")->required();
  sub.add_option("--mode", c->mode, "emulate (the CPU, bit-exact E0M3)")->capture_default_str();
  sub.add_option("--layer", c->o.layer, "Record to check")->capture_default_str();
  sub.add_option("--tokens", c->o.tokens, "Synthetic activation rows")->capture_default_str();
  sub.add_option("--step", c->o.step, "act_scale_table row used as s_t")->capture_default_str();
  sub.add_option("--seed", c->o.seed, "Seed of the activation generator")->capture_default_str();
  sub.add_flag("--s1", c->o.s1, "Also measure S1 (mean fold: e0m3(x2/s_t) x e0m3(W*mean s))");
  sub.add_option("--artifact", c->artifact,
                 "omega_e0m3_v1 artifact: validate it against the pack and compute the GEMM "
                 "from its stored packed + sfb bytes");
  sub.add_option("--min-artifact-cos", c->min_cos, "Gate on the artifact's global cosine")
      ->capture_default_str()
      ->each([c](const std::string&) { c->min_cos_given = true; });
  sub.add_flag("--json", c->json, "Print the report as JSON");
  return [c]() { return run_check(*c); };
}

}  // namespace qrepack::cli
