#include "qrepack/targets/target.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack {
namespace {

using namespace std::string_view_literals;

// model_types per target, as upstream's family registry and `coli convert` route them
// (reference/colibri-engines.md §1.1 guard, §3).
constexpr std::array kGlmTypes = {"glm_moe_dsa"sv, "glm5_moe"sv, "glm"sv};
constexpr std::array kQwen36Types = {"qwen3_5_moe"sv, "qwen3_5_moe_text"sv, "qwen3_moe"sv,
                                     "qwen3_5"sv, "qwen3_5_text"sv};
constexpr std::array kQwen3Types = {"qwen3"sv};
constexpr std::array kLlamaTypes = {"llama"sv};
constexpr std::array kOlmoeTypes = {"olmoe"sv};
constexpr std::array kGlm53Types = {"glm5_next"sv, "glm5_next_text"sv};
constexpr std::array kQwen38Types = {"qwen4_exp"sv, "qwen4_exp_text"sv};
constexpr std::array kInklingTypes = {"inkling_mm_model"sv, "inkling"sv};
constexpr std::array kKimiK3Types = {"kimi_k3"sv, "kimi_linear"sv};
// Gemma 4 runs from its GGUF: general.architecture, not a config.json model_type.
constexpr std::array kGemma4Types = {"gemma4"sv};
constexpr std::array<std::string_view, 0> kEveryKnown = {};

// --bits names per target (the GLM path's: plan/convert_plan's bit classes and projections).
constexpr std::array kGlmBits = {"experts"sv, "shared"sv, "attn"sv, "o_proj"sv,
                                 "kv_b"sv,    "dense"sv,  "io"sv,   "mtp"sv,
                                 "indexer"sv, "gate"sv,   "up"sv,   "down"sv};
constexpr std::array kExpertDownBits = {"experts"sv, "down"sv};
constexpr std::array kExpertBits = {"experts"sv};
constexpr std::array kAttnBits = {"attn"sv};
constexpr std::array kMlaHeadBits = {"mla"sv, "head"sv};
constexpr std::array<std::string_view, 0> kNoBits = {};

constexpr std::string_view kGlmFlags =
    "--bits CLASS=N (2, 3, 4, 8, 16; experts e8), --mtp, --indexer, --select, --drop, "
    "--keep-unknown, --keep-mtp, --keep-indexer, --unfuse-experts, --no-coverage-gate, "
    "--max-shard-size";

const std::array kTargets = {
    Target{TargetId::kColibriGlm, "colibri-glm", "c/colibri.c",
           "GLM-5.2 / 5.3 runtime: model-NNNNN-of-MMMMM shards + index, per-expert U8 + .qs "
           "(fmt 1-5, 8)",
           "convert_fp8_to_int4.py, repack_fp8_passthrough.py", kGlmTypes, "int4-g128", true,
           "int4-g<N>, int4-row, int8-row, int2-row, int3-g64, fp8-passthrough, bf16, f32, "
           "fp8-block128",
           kGlmBits, kGlmFlags,
           "families other than GLM-MoE-DSA (--target generic writes the layout anyway)"},
    Target{TargetId::kColibriQwen36, "colibri-qwen36", "c/qwen36.c",
           "Qwen3.5 / 3.6 (MoE and dense) / Qwen3-MoE runtime: model-globals, model-vision, "
           "model-LLLLL, model-mtp; one merged_weight per expert (two's-complement nibbles), F16 "
           "residents, qwen36_meta.json",
           "convert_qwen36.py @ab3caa78", kQwen36Types, "int4-row", true,
           "int4-row, int4-g<N>, int8-row, int2-row, int3-g64", kExpertDownBits,
           "--bits experts=2..8, down=2..8 (a mixed slab), --down-group N",
           "E8; a vision tower without a complete vision_config is dropped, recorded"},
    Target{TargetId::kColibriQwen3, "colibri-qwen3", "c/qwen3.c",
           "dense Qwen3 runtime: model-globals + model-LLLLL, 2-D int4-g64, F16 residents, "
           "qwen3_meta.json",
           "convert_qwen3_dense.py", kQwen3Types, "int4-g64", true, "int4-g<N> (N even), f16",
           kNoBits, "", "--bits; other schemes"},
    Target{TargetId::kColibriLlama, "colibri-llama", "c/llama.c",
           "Llama runtime: the BF16/F16/F32 shards staged unchanged + llama_meta.json",
           "convert_llama.py", kLlamaTypes, "as-stored", true, "as-stored", kNoBits, "",
           "any quantization (llama.c quantizes nothing it loads); --bits"},
    Target{TargetId::kColibriOlmoe, "colibri-olmoe", "c/olmoe.c",
           "OLMoE runtime: one int8 merged_weight + .qs per expert, the rest as stored",
           "convert_olmoe_merged.py", kOlmoeTypes, "int8-row", true, "int8-row", kNoBits,
           "GGUF sources: --norm-topk-prob, --qk-permuted", "other schemes; --bits"},
    Target{TargetId::kColibriGlm53, "colibri-glm53", "c/glm53.c",
           "GLM-5.3-Flash runtime: one out-NNNNN per source shard, names as stored, routed "
           "experts int4-g64 (fmt 4), everything else BF16 (F32 where the source is F32)",
           "convert_glm53.py", kGlm53Types, "int4-g64", true, "int4-g64", kNoBits, "",
           "other schemes; --bits"},
    Target{TargetId::kColibriQwen38Sidecar, "colibri-qwen38-experts-int4g64", "c/qwen38_core.h",
           "Qwen3.8-Flash-Next's experts-int4g64/ sidecar the runtime finds in the snapshot "
           "(Q38_EXPERT_INT4): per text layer one layer-NNN.safetensors of int4-g64 expert "
           "records (planar64 codes, f32 scales, data at 4096), index.json",
           "convert_qwen38_experts_int4.py @ d295eba3 (zhyanbo/colibri)", kQwen38Types, "int4-g64",
           true, "int4-g64", kNoBits, "",
           "other schemes; --bits; the MTP head's experts (they stay in the snapshot)"},
    Target{TargetId::kColibriQwen38Int4, "colibri-qwen38-int4", "c/qwen38_core.h",
           "Qwen3.8-Flash-Next experts-only overlay of the fork, mounted beside the official FP8 "
           "directory (Q38_INT4_SNAP): per expert one offset-binary int4-g64 merged_weight + qs, "
           "one file per MoE layer",
           "convert_qwen38_int4.py", kQwen38Types, "int4-g64", true,
           "int4-g<N> (N even, 8 to 4096)", kNoBits, "", "other schemes; --bits"},
    Target{TargetId::kColibriInkling, "colibri-inkling", "c/inkling.c",
           "Inkling runtime: one out-NNNNN per source shard in HF names, routed experts per-row "
           "int4 as one fused tensor per projection, residents BF16 (small ones F32)",
           "convert_inkling_int4.py", kInklingTypes, "int4-row", true, "int4-row, int8-row",
           kExpertBits, "--bits experts=4|8", "experts other than int4 or int8 per row"},
    Target{TargetId::kColibriInklingDense, "colibri-inkling-dense", "c/inkling.c",
           "Inkling's optional dense overlay (dense-int4g64/dense.safetensors): embed / lm_head "
           "and attention int8 per row, other large matrices int4-g64, the rest raw",
           "convert_inkling_dense_int4.py", kInklingTypes, "int4-g64", true, "int4-g64", kAttnBits,
           "--bits attn=4|8 (default 8)",
           "a source other than a colibri-inkling container; other schemes"},
    Target{TargetId::kColibriKimiK3, "colibri-kimi-k3", "c/kimi_k3.c",
           "Kimi K3 runtime: model-NNNNN-of-000094 per source shard, routed MXFP4 experts "
           "byte-identical in expert order, BF16 projections int8 per row or int4-g64 "
           "(U8 + .qs), the rest as stored, vision dropped",
           "k3_repack.py", kKimiK3Types, "int8-row", true, "int8-row, int4-g64", kMlaHeadBits,
           "--bits mla=4|8, head=4|8 (default 8)",
           "--bits experts/down (the MXFP4 experts are copied as stored); the vision tower "
           "(dropped, recorded)"},
    Target{TargetId::kColibriGemma4, "colibri-gemma4", "c/gemma4.c",
           "Gemma 4 runtime's packed experts (PACKED_DIR) beside the GGUF it runs: "
           "manifest.json (g4lab-expert-manifest-v2) + layer-NN.g4ex, Q4_0 gate | up | down "
           "records copied bit for bit from the GGUF",
           "none upstream (g4lab's packer is not published): gemma4_backend.c's reading",
           kGemma4Types, "as-stored", true, "as-stored (the GGUF's Q4_0 bytes)", kNoBits,
           "a Gemma 4 GGUF source",
           "expert types other than Q4_0, separate gate / up expert tensors, split GGUFs, "
           "sources other than a Gemma 4 GGUF"},
    Target{TargetId::kGeneric, "generic", "",
           "the GLM-style per-expert container for any family qrepack knows; no known engine "
           "runtime loads it for families other than GLM-MoE-DSA",
           "", kEveryKnown, "int4-g128", false,
           "int4-g<N>, int4-row, int8-row, int2-row, int3-g64, fp8-passthrough, bf16, f32, "
           "fp8-block128",
           kGlmBits, kGlmFlags, "nothing: it is the explicit opt-in"},
};

}  // namespace

std::span<const Target> targets() { return kTargets; }

const Target& target(TargetId id) {
  for (const Target& t : kTargets) {
    if (t.id == id) return t;
  }
  return kTargets[0];
}

std::string target_names() {
  std::string out;
  for (const Target& t : kTargets) out += fmt::format("{}{}", out.empty() ? "" : ", ", t.name);
  return out;
}

Result<const Target*> target_by_name(std::string_view name) {
  for (const Target& t : kTargets) {
    if (t.name == name) return &t;
  }
  std::string hint;
  for (const Target& t : kTargets) {
    if (t.name.find(name) != std::string_view::npos ||
        (name.size() > 8 && name.find(t.name.substr(8)) != std::string_view::npos)) {
      hint = fmt::format(" (did you mean {}?)", t.name);
      break;
    }
  }
  return Error(ErrorKind::kUsage, fmt::format("--target \"{}\" is not a target{}; targets: {}",
                                              name.substr(0, 64), hint, target_names()))
      .with_rule("target.name");
}

bool target_takes_bits(const Target& t, std::string_view name) {
  for (std::string_view b : t.bits) {
    if (b == name) return true;
  }
  return false;
}

std::vector<std::string_view> default_model_types(const Target& t) {
  std::vector<std::string_view> out;
  for (std::string_view m : t.model_types) {
    if (default_target(m) == &t) out.push_back(m);
  }
  return out;
}

bool target_accepts(const Target& t, std::string_view model_type) {
  if (t.id == TargetId::kGeneric) return family_for_model_type(model_type) != nullptr;
  for (std::string_view m : t.model_types) {
    if (m == model_type) return true;
  }
  return false;
}

const Target* default_target(std::string_view model_type) {
  for (const Target& t : kTargets) {
    if (t.has_reader && target_accepts(t, model_type)) return &t;
  }
  return nullptr;
}

Result<std::optional<std::string>> read_model_type(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(dir) / "config.json";
  if (path_kind(p.string()) == PathKind::kMissing) return std::optional<std::string>{};
  QR_ASSIGN_OR_RETURN(text,
                      read_small_file(p.string(), kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p.string()));
  const auto type_of = [](const nlohmann::json& o) -> std::optional<std::string> {
    if (!o.is_object() || !o.contains("model_type") || !o["model_type"].is_string()) {
      return std::nullopt;
    }
    return o["model_type"].get<std::string>();
  };
  if (auto t = type_of(*j)) return std::optional<std::string>(std::move(*t));
  if (j->is_object() && j->contains("text_config")) {
    if (auto t = type_of((*j)["text_config"])) return std::optional<std::string>(std::move(*t));
  }
  return Error(ErrorKind::kInvalidConfig, "config.json has no model_type string")
      .in_file(p.string())
      .with_rule("config.model_type");
}

}  // namespace qrepack
