// `qrepack fixture moe-fp8 -o DIR`: writes a deterministic synthetic checkpoint in the real
// GLM/DeepSeek FP8 layout, for tests, demos and benchmarks without a multi-hour download.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/destination.h"
#include "cli/docgen.h"
#include "cli/format.h"
#include "cli/model_cli.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/fixtures/moe_fp8.h"
#include "qrepack/fixtures/omega_pack.h"
#include "qrepack/fixtures/qat_checkpoint.h"
#include "qrepack/fixtures/target_fixtures.h"
#include "qrepack/model/oracle.h"

namespace qrepack::cli {
namespace {

// The oracle in the runtime's schema, computed on the staged checkpoint so it describes
// exactly the weights a converter ingests (FP8 or BF16 decoded, routed experts included), and
// published with it (a model without a forward pass refuses, and nothing is published).
Status staged_oracle(const std::string& staged, const std::string& out) {
  OracleRequest r;
  r.checkpoint = staged;
  r.shown_checkpoint = out;
  return write_oracle(r);
}

constexpr const char* kOracleHelp =
    "Also write the oracle its runtime scores itself against, in that runtime's schema "
    "(ref_glm.json, ref_llama.json, ref.json, ref_qwen36.json, ref_olmoe.json, "
    "ref_inkling.json or ref_kimi_k3.json; see qrepack oracle)";

struct MoeFixtureCli {
  std::string out;
  std::string preset = "tiny";
  double scale_gb = 0;
  bool bf16 = false;
  bool fused = false;
  std::uint64_t seed = 0;
  std::string max_shard_size;
  bool oracle = false;
  std::string encoding;
  std::string family;  ///< a family fixture's name (empty: moe-fp8)
};

using namespace std::string_view_literals;

constexpr std::array kPresets = {
    std::pair{"tiny"sv, FixturePreset::kTiny},
    std::pair{"bench"sv, FixturePreset::kBench},
    std::pair{"seed-bench"sv, FixturePreset::kSeedBench},
    std::pair{"count"sv, FixturePreset::kCount},
    std::pair{"tiny-e8"sv, FixturePreset::kTinyE8},
};

Status run_moe_fp8(const MoeFixtureCli& c) {
  MoeFixtureOptions o;
  const auto preset = std::find_if(kPresets.begin(), kPresets.end(),
                                   [&c](const auto& p) { return p.first == c.preset; });
  if (preset == kPresets.end()) {
    return Error(ErrorKind::kUsage, fmt::format("--preset must be {}, got \"{}\"",
                                                or_list(table_names(kPresets)), c.preset));
  }
  o.preset = preset->second;
  if (c.scale_gb < 0 || c.scale_gb > 4096) {
    return Error(ErrorKind::kUsage, "--scale-gb must be between 0 and 4096");
  }
  o.scale_gb = c.scale_gb;
  o.bf16 = c.bf16;
  if (!c.encoding.empty()) {
    QR_ASSIGN_OR_RETURN(e, parse_fixture_encoding(c.encoding));
    o.encoding = e;
  }
  if (!c.family.empty()) {
    o.config =
        c.scale_gb > 0 ? family_fixture_bench_config(c.family) : family_fixture_config(c.family);
    if (!o.config) {
      return Error(ErrorKind::kUsage,
                   fmt::format("fixture {} has no bench widths for --scale-gb (the GQA families "
                               "do: qwen3-moe, minimax, llama, mistral, qwen2, qwen3)",
                               c.family));
    }
  }
  o.fused_experts = c.fused;
  o.seed = c.seed;
  if (!c.max_shard_size.empty()) {
    QR_ASSIGN_OR_RETURN(limit, parse_size(c.max_shard_size));
    if (limit == 0) return Error(ErrorKind::kUsage, "--max-shard-size must be positive");
    o.max_shard_bytes = limit;
  }
  QR_ASSIGN_OR_RETURN(destination, Destination::open(c.out, false));
  QR_ASSIGN_OR_RETURN(rep, write_moe_fp8_fixture(destination.write_dir(), o));
  if (c.oracle) QR_TRY(staged_oracle(destination.write_dir(), c.out));
  QR_TRY(destination.commit());
  if (!c.family.empty()) {
    fmt::print(
        "wrote a {} checkpoint (model_type {}, {}, {} layers of which {} MoE, {} routed "
        "experts) to {}\n",
        family(rep.config.family).title, rep.config.model_type,
        c.encoding.empty() ? "its release encoding" : c.encoding, rep.config.num_hidden_layers,
        moe_layer_count(rep.config), rep.config.n_routed_experts, c.out);
  } else {
    fmt::print("wrote {} ({}, {} layers of which {} dense, {} routed experts{}) to {}\n",
               !c.encoding.empty() ? c.encoding
               : c.bf16            ? std::string("BF16 model")
                                   : std::string("FP8 E4M3 128x128-block model"),
               c.scale_gb > 0 ? fmt::format("bench dims, ~{} GB", c.scale_gb) : c.preset,
               rep.config.num_hidden_layers, rep.config.first_k_dense_replace,
               rep.config.n_routed_experts, c.fused ? ", fused" : "", c.out);
  }
  fmt::print("{} tensors ({} FP8, {} scale sidecars), {} in {} shard(s)\n", rep.tensors,
             rep.fp8_tensors, rep.scale_sidecars, human_bytes(rep.bytes), rep.shards);
  return ok_status();
}

struct TargetFixtureCli {
  const TargetFixture* fixture = nullptr;
  std::string out;
  std::uint64_t seed = 0;
  bool oracle = false;
};

Status run_target_fixture(const TargetFixtureCli& c) {
  QR_ASSIGN_OR_RETURN(destination, Destination::open(c.out, false));
  QR_ASSIGN_OR_RETURN(rep, c.fixture->write(destination.write_dir(), c.seed));
  if (c.oracle) QR_TRY(staged_oracle(destination.write_dir(), c.out));
  QR_TRY(destination.commit());
  fmt::print("wrote {} to {}\n", c.fixture->summary, c.out);
  fmt::print("{} tensors, {} in {} shard(s)\n", rep.tensors, human_bytes(rep.bytes), rep.shards);
  return ok_status();
}

struct OmegaFixtureCli {
  std::string out;
  bool small = false, full = false;
  std::uint64_t seed = 0;
};

Status run_omega_pack(const OmegaFixtureCli& c) {
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(c.out));
  const OmegaFixtureSize size = c.small  ? OmegaFixtureSize::kSmall
                                : c.full ? OmegaFixtureSize::kFull
                                         : OmegaFixtureSize::kFour;
  QR_ASSIGN_OR_RETURN(rep, write_omega_pack_fixture(c.out, size, c.seed));
  Table t({"record", "N", "K", "T"}, {false, true, true, true});
  for (const auto& r : rep.records) {
    t.add({r.name, std::to_string(r.n), std::to_string(r.k), std::to_string(r.steps)});
  }
  t.print(stdout);
  fmt::print("wrote a synthetic dit_svdquant_v1 pack ({} records, {}) to {}\n", rep.records.size(),
             human_bytes(rep.bytes), c.out);
  return ok_status();
}

struct QatFixtureCli {
  std::string out;
  std::string encoding = "bf16";
  std::uint64_t seed = 37;
  bool full = false;
};

Status run_qat_fixture(const QatFixtureCli& c) {
  const auto dtype = dtype_from_safetensors(c.encoding == "bf16"  ? "BF16"
                                            : c.encoding == "f16" ? "F16"
                                            : c.encoding == "f32" ? "F32"
                                                                  : "");
  if (!dtype) {
    return Error(ErrorKind::kUsage,
                 fmt::format("fixture qat --encoding is bf16, f16 or f32, not {}", c.encoding));
  }
  QR_ASSIGN_OR_RETURN(lock, OutputLock::acquire(c.out));
  QR_ASSIGN_OR_RETURN(rep, write_qat_fixture(c.out, *dtype, c.seed, c.full));
  fmt::print(
      "wrote a MIP-QAT pi0.5 checkpoint ({} action-expert projections in {}, {} tensors, {}) "
      "to {}\n",
      rep.expert_weights, c.encoding, rep.tensors, human_bytes(rep.bytes), c.out);
  return ok_status();
}

}  // namespace

Action add_fixture(CLI::App& sub) {
  sub.require_subcommand(1);
  auto c = std::make_shared<MoeFixtureCli>();
  CLI::App* moe = sub.add_subcommand(
      "moe-fp8", "GLM-MoE-DSA / DeepSeek-V3-style FP8 block-scaled checkpoint directory");
  moe->add_option("-o,--out", c->out, "Output directory (created)")->required();
  with_choices(
      moe->add_option(
             "--preset", c->preset,
             "tiny (default, a few MB), bench (about 1 GB), seed-bench (the engine fixture "
             "authors' bench model, N(0, 0.02) weights, about 330 MB), count (GLM-5.2's "
             "78 layers x 256 experts, about 120k tensors, at tiny dims) or tiny-e8 (tiny with "
             "hidden and expert widths 256, which E8/IQ3 needs; about 6 MB)")
          ->capture_default_str(),
      table_names(kPresets));
  moe->add_option("--scale-gb", c->scale_gb, "Bench dims with enough layers for about N GB");
  moe->add_flag("--bf16", c->bf16, "Write the same model unquantized");
  moe->add_flag("--fused-experts", c->fused,
                "HF fused experts: mlp.experts.gate_up_proj [E,2M,I] and down_proj [E,I,M]");
  moe->add_flag("--oracle", c->oracle, kOracleHelp);
  moe->add_option("--seed", c->seed, "Seed of the value generator")->capture_default_str();
  moe->add_option("--max-shard-size", c->max_shard_size,
                  "Largest shard (default 256kB for tiny, 500MB otherwise)");
  const char* encoding_help =
      "How projections are stored: bf16, FP8 (block, UE8M0 or BF16 block scales, per-tensor, "
      "32x32 tiles), NVFP4 (ModelOpt, compressed-tensors), MXFP4, int4 (CT) or MLX affine "
      "(default: the family's release encoding)";
  with_choices(moe->add_option("--encoding", c->encoding, encoding_help), fixture_encoding_names());
  // One subcommand per family fixture: the family's real names, shapes and dtypes, tiny dims.
  std::vector<std::pair<CLI::App*, std::shared_ptr<MoeFixtureCli>>> fams;
  for (std::string_view name : family_fixture_names()) {
    auto fc = std::make_shared<MoeFixtureCli>();
    fc->family = std::string(name);
    const auto cfg = family_fixture_config(name);
    CLI::App* f = sub.add_subcommand(std::string(name),
                                     fmt::format("{} checkpoint (model_type {}), tiny dims",
                                                 family(cfg->family).title, cfg->model_type));
    f->add_option("-o,--out", fc->out, "Output directory (created)")->required();
    with_choices(f->add_option("--encoding", fc->encoding, encoding_help),
                 fixture_encoding_names());
    f->add_option("--seed", fc->seed, "Seed of the value generator")->capture_default_str();
    f->add_option("--max-shard-size", fc->max_shard_size,
                  "Largest shard (default 256kB; 500MB with --scale-gb)");
    f->add_option("--scale-gb", fc->scale_gb,
                  "Bench widths (hidden 2048, 32 experts of 768) with enough layers for about N GB "
                  "(GQA families)");
    f->add_flag("--oracle", fc->oracle, kOracleHelp);
    fams.emplace_back(f, fc);
  }
  // One subcommand per target fixture (a container target's family in its release layout).
  std::vector<std::pair<CLI::App*, std::shared_ptr<TargetFixtureCli>>> targets;
  for (const TargetFixture& t : target_fixtures()) {
    auto tc = std::make_shared<TargetFixtureCli>();
    tc->fixture = &t;
    CLI::App* f = sub.add_subcommand(std::string(t.name), std::string(t.help));
    f->add_option("-o,--out", tc->out, "Output directory (created)")->required();
    f->add_option("--seed", tc->seed, "Seed of the value generator")->capture_default_str();
    f->add_flag("--oracle", tc->oracle, kOracleHelp);
    targets.emplace_back(f, tc);
  }
  auto oc = std::make_shared<OmegaFixtureCli>();
  CLI::App* omega = sub.add_subcommand(
      "omega-pack", "Omega-QVLA dit_svdquant_v1 rank-0 pack (.pt) with 4 pi0.5-shaped records");
  omega->add_option("-o,--out", oc->out, "Output .pt file (replaced atomically)")->required();
  auto* small =
      omega->add_flag("--small", oc->small, "Tiny shapes (N, K of a few hundred) for unit tests");
  omega
      ->add_flag("--full", oc->full,
                 "All 252 records of pi0.5 (about 4.6 GB of fp16 weights), written one record "
                 "field at a time")
      ->excludes(small);
  omega->add_option("--seed", oc->seed, "Seed of the value generator")->capture_default_str();
  auto qc = std::make_shared<QatFixtureCli>();
  CLI::App* qat = sub.add_subcommand(
      "qat",
      "MIP-QAT pi0.5 checkpoint (.safetensors): the action expert's 126 projections in "
      "their real names at reduced widths, for convert/check --to e0m3-sfb");
  qat->add_option("-o,--out", qc->out, "Output .safetensors file (replaced atomically)")
      ->required();
  with_choices(qat->add_option("--encoding", qc->encoding,
                               "How the projections are stored: bf16 (default), f16 or f32")
                   ->capture_default_str(),
               {"bf16", "f16", "f32"});
  qat->add_option("--seed", qc->seed, "Seed of the value generator")->capture_default_str();
  qat->add_flag("--full", qc->full,
                "pi0.5's widths (hidden 1024, attention 2048, KV 256, MLP 4096): 623 MB in BF16, "
                "written one tensor at a time");
  return [c, moe, oc, omega, qc, qat, fams, targets]() -> Status {
    if (moe->parsed()) return run_moe_fp8(*c);
    for (const auto& [f, fc] : fams) {
      if (f->parsed()) return run_moe_fp8(*fc);
    }
    for (const auto& [f, tc] : targets) {
      if (f->parsed()) return run_target_fixture(*tc);
    }
    if (omega->parsed()) return run_omega_pack(*oc);
    if (qat->parsed()) return run_qat_fixture(*qc);
    return Error(ErrorKind::kUsage, "fixture needs a kind: moe-fp8, omega-pack, qat or a family");
  };
}

}  // namespace qrepack::cli
