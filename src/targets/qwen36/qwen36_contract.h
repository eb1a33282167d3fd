// colibri-qwen36's contract (upstream qwen36_tensor_kinds.py @ab3caa78) and options: where each
// source name goes, the schemes the runtime reads, and Python's reading of config numbers.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "qrepack/core/error.h"
#include "qrepack/targets/container.h"

namespace qrepack::qwen36 {

using Json = nlohmann::ordered_json;

constexpr std::string_view kRule = "qwen36.config";
constexpr const char* kClefConfig = "joint_head_config.json";
constexpr const char* kClefWeights = "joint_head.safetensors";
constexpr std::array<std::string_view, 4> kMtpGlobals = {
    "fc.weight", "norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight"};
constexpr std::array<std::string_view, 3> kProjections = {"gate_proj", "up_proj", "down_proj"};
// The vision_config keys the meta's "vision" object takes, in its order.
constexpr std::array<std::pair<const char*, const char*>, 10> kVisionKeys = {{
    {"depth", "depth"},
    {"hidden", "hidden_size"},
    {"heads", "num_heads"},
    {"inter", "intermediate_size"},
    {"patch", "patch_size"},
    {"merge", "spatial_merge_size"},
    {"temporal", "temporal_patch_size"},
    {"in_ch", "in_channels"},
    {"out_hidden", "out_hidden_size"},
    {"num_pos", "num_position_embeddings"},
}};

/// One of the contract's layer kinds (after "<prefix>layers.<i>.").
bool layer_kind(std::string_view k);
/// "mlp.experts.<e>.<proj>.weight" -> (e, projection index).
std::optional<std::pair<std::uint64_t, std::size_t>> per_expert(std::string_view k);
/// The experts of every layer in one tensor per projection (or gate and up in one): HF's fused
/// tensors and mlx-lm's switch_mlp stacks, recognized as per-expert slices.
bool stacked_experts(std::string_view k);
/// A routed expert's tensor, stacked or per expert (merged, never written as itself).
bool expert_kind(std::string_view k);

enum class Place : std::uint8_t { kGlobal, kLayer, kMtpGlobal, kMtpLayer, kVision, kUnknown };

struct Placed {
  Place place = Place::kUnknown;
  std::uint64_t layer = 0;
  /// The layer kind, the global's output name, or the vision tensor's name after its prefix.
  std::string kind;
};

/// Where source name `n` goes, the text model's names under `prefix`.
Placed classify(std::string_view n, std::string_view prefix);

struct Options {
  int ebits = 4;
  std::uint64_t gs = 0;
  int down_bits = 0;  ///< 0: not mixed
  std::uint64_t down_gs = 0;
};

/// The experts' bits and groups from --to, --bits and --down-group (refused: what qwen36.c
/// does not read).
Result<Options> resolve_options(const ContainerOptions& o);
/// The quantizer of `bits` per `group` (0: per row), two's-complement nibbles.
QuantRule rule_for(int bits, std::uint64_t group);

/// Python's int(value) of a config number (bounded: a file's number is input), or `fallback`.
std::int64_t json_int(const Json& c, const char* key, std::int64_t fallback);
double json_float(const Json& c, const char* key, double fallback);
/// Python's truthiness of a config value (absent: false).
bool truthy(const Json& c, const char* key);

}  // namespace qrepack::qwen36
