// The containers qrepack writes, as data: one row per engine runtime's container (a *target*).
// A target says which runtime loads it, which model_types it accepts, the scheme it defaults
// to and what it is built from. Each family names its default target as the engine's own
// `coli convert` would route it (reference/colibri-engines.md §1.1, §3); a (family, target)
// that no engine loads is refused unless `--target generic` asks for it. docs/families.md's
// engine column is this table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

enum class TargetId : std::uint8_t {
  kGeneric,            ///< the GLM-style per-expert container with no engine known to load it
  kColibriGlm,         ///< c/colibri.c (GLM-5.2 / 5.3): out-NNNNN, per-expert U8 + .qs
  kColibriQwen36,      ///< c/qwen36.c: model-globals + model-LLLLL, merged_weight, F16 residents
  kColibriQwen3,       ///< c/qwen3.c: dense Qwen3, 2-D int4-g64, F16 residents, qwen3_meta.json
  kColibriLlama,       ///< c/llama.c: the shards staged unchanged + llama_meta.json
  kColibriOlmoe,       ///< c/olmoe.c: merged int8 experts, dense tensors as stored
  kColibriGlm53,       ///< c/glm53.c (GLM-5.3-Flash): int4-g64 experts, BF16 / F32 rest, names kept
  kColibriQwen38Int4,  ///< Qwen3.8-Flash-Next: the fork's experts-only int4-g64 overlay
  kColibriQwen38Sidecar,  ///< Qwen3.8-Flash-Next: the runtime's experts-int4g64/ sidecar
  kColibriInkling,        ///< c/inkling.c: per-row int4 fused experts, residents as stored
  kColibriInklingDense,   ///< c/inkling.c's optional dense overlay (dense-int4g64/)
  kColibriKimiK3,         ///< c/kimi_k3.c: k3_repack.py's container (MXFP4 experts raw)
  kColibriGemma4,         ///< c/gemma4.c: PACKED_DIR (manifest.json + layer-NN.g4ex) from a GGUF
};

struct Target {
  TargetId id;
  std::string_view name;     ///< `--target NAME`
  std::string_view runtime;  ///< the engine runtime that loads it ("" for generic)
  std::string_view title;    ///< in words
  std::string_view tool;     ///< the upstream converter it is byte-identical with
  /// config.json model_types it converts (for generic: every model_type qrepack knows).
  std::span<const std::string_view> model_types;
  std::string_view default_scheme;  ///< `--to` when none is given
  /// The runtime loads it: false only for generic.
  bool has_reader;
  /// The --to values it takes, in words ("int4-row, int4-g<N>, int8-row"); the planner holds
  /// the finer rules and says them when it refuses.
  std::string_view schemes;
  /// The --bits names it takes (empty: none); `convert` refuses any other.
  std::span<const std::string_view> bits;
  /// What else it takes besides the common flags, in words ("--down-group N").
  std::string_view flags;
  /// What it refuses or leaves out, in words.
  std::string_view refuses;
};

/// Whether `t` takes `--bits NAME=...`.
bool target_takes_bits(const Target& t, std::string_view name);
/// The model_types whose default target is `t` (what `coli convert` sends to its runtime).
std::vector<std::string_view> default_model_types(const Target& t);

std::span<const Target> targets();
const Target& target(TargetId id);
/// The row named `name`, or a usage error listing the names (with a "did you mean").
Result<const Target*> target_by_name(std::string_view name);
/// The target the engine's `coli convert` routes `model_type` to, or null when no engine
/// runtime loads that family (DeepSeek-V3, Kimi-K2, MiniMax, Mistral, Qwen2).
const Target* default_target(std::string_view model_type);
/// Whether `t` converts checkpoints of `model_type`.
bool target_accepts(const Target& t, std::string_view model_type);
/// "colibri-glm, colibri-qwen36, ..." for help and errors.
std::string target_names();

/// Reads `dir`/config.json's model_type (the top level's, else text_config's), or nullopt when
/// there is no config.json. Bounded like every config read.
Result<std::optional<std::string>> read_model_type(const std::string& dir);

}  // namespace qrepack
