// colibri-qwen36's contract and options (qwen36_contract.h).
#include "targets/qwen36/qwen36_contract.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "qrepack/core/checked.h"
#include "qrepack/schemes/scheme.h"
#include "targets/container/tensor_contract.h"

namespace qrepack::qwen36 {
namespace {

// The layer kinds of the contract (qwen36_tensor_kinds.py), after "<prefix>layers.<i>.".
constexpr std::array<std::string_view, 31> kLayerKinds = {
    "input_layernorm.weight", "post_attention_layernorm.weight", "linear_attn.A_log",
    "linear_attn.conv1d.weight", "linear_attn.dt_bias", "linear_attn.in_proj_a.weight",
    "linear_attn.in_proj_b.weight", "linear_attn.in_proj_qkv.weight",
    "linear_attn.in_proj_z.weight", "linear_attn.norm.weight", "linear_attn.out_proj.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate.weight", "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
    "mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight", "mlp.gate_proj.weight",
    "mlp.up_proj.weight", "mlp.down_proj.weight", "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
    // An MLX source's experts, stacked per projection by mlx-lm (qrepack's extension).
    "mlp.switch_mlp.gate_proj.weight", "mlp.switch_mlp.up_proj.weight",
    "mlp.switch_mlp.down_proj.weight",
    "",  // sentinel: never matches a real kind
};

}  // namespace

bool layer_kind(std::string_view k) {
  for (std::string_view x : kLayerKinds) {
    if (!x.empty() && x == k) return true;
  }
  return false;
}

// "mlp.experts.<e>.<proj>.weight" -> (e, projection index).
std::optional<std::pair<std::uint64_t, std::size_t>> per_expert(std::string_view k) {
  constexpr std::string_view p = "mlp.experts.", tail = ".weight";
  if (!k.starts_with(p) || !k.ends_with(tail)) return std::nullopt;
  const auto e = split_index(k.substr(0, k.size() - tail.size()), p);
  for (std::size_t j = 0; j < kProjections.size(); ++j) {
    if (e && e->second == kProjections[j]) return std::pair{e->first, j};
  }
  return std::nullopt;
}

// The experts of every layer in one tensor per projection (or gate and up in one): HF's fused
// tensors and mlx-lm's switch_mlp stacks, recognized as per-expert slices.
bool stacked_experts(std::string_view k) {
  return k == "mlp.experts.gate_up_proj" || k == "mlp.experts.down_proj" ||
         k.starts_with("mlp.switch_mlp.");
}

// A routed expert's tensor, stacked or per expert (merged, never written as itself).
bool expert_kind(std::string_view k) {
  return k.starts_with("mlp.experts.") || k.starts_with("mlp.switch_mlp.");
}

Placed classify(std::string_view n, std::string_view prefix) {
  if (n.starts_with("mtp.")) {
    const std::string_view rest = n.substr(4);
    for (std::string_view g : kMtpGlobals) {
      if (rest == g) return {Place::kMtpGlobal, 0, std::string(n)};
    }
    // The head has one layer, never a DeltaNet one: mtp.layers.1.* is an unknown name.
    if (rest.starts_with("layers.0.")) {
      const std::string_view k = rest.substr(9);
      if ((layer_kind(k) || per_expert(k)) && !k.starts_with("linear_attn."))
        return {Place::kMtpLayer, 0, std::string(k)};
    }
    return {};
  }
  for (std::string_view v : {"model.visual.", "visual."}) {
    if (n.starts_with(v) && n.size() > v.size())
      return {Place::kVision, 0, std::string(n.substr(v.size()))};
  }
  if (n == "lm_head.weight" || n == std::string(prefix) + "lm_head.weight") {
    return {Place::kGlobal, 0, "lm_head.weight"};
  }
  if (!n.starts_with(prefix)) return {};
  const std::string_view rest = n.substr(prefix.size());
  if (rest == "embed_tokens.weight" || rest == "norm.weight") {
    return {Place::kGlobal, 0, "model." + std::string(rest)};
  }
  const auto layer = split_index(rest, "layers.");
  if (!layer || !(layer_kind(layer->second) || per_expert(layer->second))) return {};
  return {Place::kLayer, layer->first, std::string(layer->second)};
}

Result<Options> resolve_options(const ContainerOptions& o) {
  QR_ASSIGN_OR_RETURN(s, parse_scheme(o.scheme));
  Options r;
  switch (s.kind) {
    case SchemeKind::kInt4Row:
      break;
    case SchemeKind::kInt4Group:
      r.gs = s.group;
      break;
    case SchemeKind::kInt8Row:
      r.ebits = 8;
      break;
    case SchemeKind::kInt2Row:
      r.ebits = 2;
      break;
    case SchemeKind::kInt3G64:
      r.ebits = 3, r.gs = 64;
      break;
    default:
      return Error(ErrorKind::kUsage,
                   fmt::format("--target colibri-qwen36 quantizes experts with int4-row, "
                               "int4-g<N>, int8-row, int2-row or int3-g64, not --to {}",
                               o.scheme))
          .with_rule("target.scheme");
  }
  if (o.expert_bits) r.ebits = o.expert_bits;
  if (o.down_bits && o.down_bits != r.ebits) {
    if (r.ebits > 4 || o.down_bits < 5) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits down={} with experts at {} bits: the mixed slab qwen36.c "
                               "reads holds int4 gate/up (experts <= 4) and int8 down (5..8)",
                               o.down_bits, r.ebits))
          .with_rule("target.scheme");
    }
    r.down_bits = o.down_bits;
    r.down_gs = o.down_group;
  } else if (o.down_group) {
    return Error(ErrorKind::kUsage, "--down-group goes with --bits down=5..8 (the mixed slab)")
        .with_rule("target.scheme");
  }
  return r;
}

QuantRule rule_for(int bits, std::uint64_t group) {
  QuantRule q;
  q.bits = bits;
  q.group = group;
  q.nibbles = Nibbles::kTwosComplement;
  return q;
}

// Python's int(value) of a config number (bounded: a file's number is input), or `fallback`.
std::int64_t json_int(const Json& c, const char* key, std::int64_t fallback) {
  if (!c.contains(key)) return fallback;
  const auto& v = c[key];
  if (v.is_number_unsigned()) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(v.get<std::uint64_t>(), kMaxDim));
  }
  if (v.is_number_integer())
    return std::max<std::int64_t>(v.get<std::int64_t>(), -static_cast<std::int64_t>(kMaxDim));
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::fabs(v.get<double>()) < 1e15) {
    return static_cast<std::int64_t>(v.get<double>());
  }
  return fallback;
}

double json_float(const Json& c, const char* key, double fallback) {
  if (!c.contains(key) || !c[key].is_number()) return fallback;
  return c[key].get<double>();
}

bool truthy(const Json& c, const char* key) {
  if (!c.contains(key)) return false;
  const auto& v = c[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return false;
}

}  // namespace qrepack::qwen36
