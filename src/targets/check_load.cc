// check_load_target: what each container runtime's loader checks when it opens a directory,
// read from the loaders' sources (c/llama.c, c/qwen3.c, c/olmoe.c, c/qwen36.c @ the commits
// reference/colibri-engines.md §8 names): the config and meta keys they require, the tensors
// they look up by name, and the element or byte counts they accept. Extra tensors are ignored,
// as the loaders ignore them.
#include "qrepack/targets/check_load.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "io/fs_util.h"
#include "io/json_file.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/checkpoint.h"
#include "targets/check_load_parts.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

Result<Json> read_json(const std::string& dir, const char* name, bool required) {
  const std::string p = (fs::path(dir) / name).string();
  if (path_kind(p) == PathKind::kMissing) {
    if (!required) return Json();
    return Error(ErrorKind::kInvalidConfig, fmt::format("{} is missing", name))
        .in_file(p)
        .with_rule("check_load.config");
  }
  QR_ASSIGN_OR_RETURN(j, read_json_file(p, ErrorKind::kInvalidConfig, kMaxConfigBytes));
  if (!j.is_object()) {
    return Error(ErrorKind::kInvalidConfig, "not a JSON object")
        .in_file(p)
        .with_rule("check_load.config");
  }
  return j;
}

std::uint64_t meta_or(const Json& meta, const char* key, std::uint64_t value) {
  if (meta.is_object() && meta.contains(key) && meta[key].is_number_unsigned() &&
      meta[key].get<std::uint64_t>() <= kMaxDim) {
    return meta[key].get<std::uint64_t>();
  }
  return value;
}

Status check_llama(Loader& l, const Json& c) {
  auto& r = l.report();
  if (!c.contains("model_type") || c["model_type"] != "llama") {
    r.unloadable.push_back("config.json: model_type is not \"llama\"");
  }
  for (const char* b : {"attention_bias", "mlp_bias"}) {
    if (c.contains(b) && c[b].is_boolean() && c[b].get<bool>()) {
      r.unloadable.push_back(fmt::format("config.json: {} is not supported by llama.c", b));
    }
  }
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t h = need(c, "num_attention_heads", r), f = need(c, "intermediate_size", r);
  const std::uint64_t v = need(c, "vocab_size", r);
  const std::uint64_t kv = need(c, "num_key_value_heads", r, h, false);
  const std::uint64_t hd = need(c, "head_dim", r, h ? d / h : 0, false);
  if (!r.unloadable.empty()) return ok_status();
  if (kv == 0 || h % kv != 0 || hd % 2 != 0 || hd < 2) {
    r.unloadable.push_back("config.json: heads, kv heads and head_dim do not fit llama.c");
    return ok_status();
  }
  const bool tied = c.contains("tie_word_embeddings") && c["tie_word_embeddings"] == true;
  l.float_tensor("model.embed_tokens.weight", v * d);
  l.float_tensor("model.norm.weight", d);
  if (!tied) l.float_tensor("lm_head.weight", v * d);
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    l.float_tensor(p + "self_attn.q_proj.weight", h * hd * d);
    l.float_tensor(p + "self_attn.k_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.v_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.o_proj.weight", d * h * hd);
    l.float_tensor(p + "mlp.gate_proj.weight", f * d);
    l.float_tensor(p + "mlp.up_proj.weight", f * d);
    l.float_tensor(p + "mlp.down_proj.weight", d * f);
  }
  return ok_status();
}

// qwen3.c's load_wm: int4 when U8/I8 of O * ceil(I/2) bytes with a .qs of O * ceil(I/gs)
// elements, else a float matrix of O * I elements.
void qwen3_matrix(Loader& l, const std::string& name, std::uint64_t o, std::uint64_t i,
                  std::uint64_t gs) {
  const auto t = l.get(name);
  if (!t) return;
  const Dtype dt = t->entry->dtype;
  const auto qs = l.ck().find(name + ".qs");
  if ((dt == Dtype::kU8 || dt == Dtype::kI8) && t->entry->byte_size() == o * ((i + 1) / 2) && qs) {
    const std::uint64_t g = gs ? gs : 64;
    if (qs->entry->numel() != o * ceil_div(i, g)) {
      l.bad(name + ".qs", fmt::format("{} elements, int4-g{} implies {}", qs->entry->numel(), g,
                                      o * ceil_div(i, g)));
    } else {
      ++l.report().checked;
    }
    return;
  }
  l.float_tensor(name, o * i);
}

Status check_qwen3(Loader& l, const Json& c, const Json& meta) {
  auto& r = l.report();
  for (const char* k : {"hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
                        "num_attention_heads", "num_key_value_heads"}) {
    need(c, k, r);
  }
  if (!c.contains("rms_norm_eps") || !c["rms_norm_eps"].is_number()) {
    r.unloadable.push_back("config.json: missing or non-numeric \"rms_norm_eps\"");
  }
  if (!r.unloadable.empty()) return ok_status();
  const std::uint64_t d = meta_or(meta, "hidden", c["hidden_size"].get<std::uint64_t>());
  const std::uint64_t layers =
      meta_or(meta, "n_layers", c["num_hidden_layers"].get<std::uint64_t>());
  const std::uint64_t v = meta_or(meta, "vocab", c["vocab_size"].get<std::uint64_t>());
  const std::uint64_t h = meta_or(meta, "q_heads", c["num_attention_heads"].get<std::uint64_t>());
  const std::uint64_t kv = meta_or(meta, "kv_heads", c["num_key_value_heads"].get<std::uint64_t>());
  const std::uint64_t inter = meta_or(meta, "inter", c["intermediate_size"].get<std::uint64_t>());
  const std::uint64_t hd = meta_or(meta, "head_dim", need(c, "head_dim", r, h ? d / h : 0, false));
  const std::uint64_t o_in = meta_or(meta, "o_in", h * hd);
  const std::uint64_t gs = meta_or(meta, "gs", 0);
  if (layers == 0 || layers > 512 || h == 0 || kv == 0 || h % kv || hd % 2) {
    r.unloadable.push_back("qwen3_meta.json / config.json: dims qwen3.c's validate_cfg refuses");
    return ok_status();
  }
  l.float_tensor("model.embed_tokens.weight", v * d);
  if (l.ck().find("lm_head.weight")) l.float_tensor("lm_head.weight", v * d);
  l.float_tensor("model.norm.weight", d);
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    l.float_tensor(p + "self_attn.q_norm.weight", hd);
    l.float_tensor(p + "self_attn.k_norm.weight", hd);
    qwen3_matrix(l, p + "self_attn.q_proj.weight", h * hd, d, gs);
    qwen3_matrix(l, p + "self_attn.k_proj.weight", kv * hd, d, gs);
    qwen3_matrix(l, p + "self_attn.v_proj.weight", kv * hd, d, gs);
    qwen3_matrix(l, p + "self_attn.o_proj.weight", d, o_in, gs);
    qwen3_matrix(l, p + "mlp.gate_proj.weight", inter, d, gs);
    qwen3_matrix(l, p + "mlp.up_proj.weight", inter, d, gs);
    qwen3_matrix(l, p + "mlp.down_proj.weight", d, inter, gs);
  }
  return ok_status();
}

// An expert's merged_weight of `bytes` (any one of `accepted`) and .qs of `scales` elements.
void merged_expert(Loader& l, const std::string& base,
                   std::initializer_list<std::uint64_t> accepted,
                   const std::function<std::uint64_t(std::uint64_t)>& scales_for) {
  const auto w = l.get(base + "merged_weight");
  const auto qs = l.get(base + "qs");
  if (!w || !qs) return;
  const std::uint64_t n = w->entry->byte_size();
  bool fits = false;
  for (std::uint64_t a : accepted) fits |= n == a;
  if (!fits) {
    l.bad(base + "merged_weight", fmt::format("{} bytes, none of the sizes the loader accepts", n));
    return;
  }
  if (qs->entry->numel() != scales_for(n) || !is_float(qs->entry->dtype)) {
    l.bad(base + "qs",
          fmt::format("{} elements, the loader expects {}", qs->entry->numel(), scales_for(n)));
    return;
  }
  l.report().checked += 2;
}

Status check_olmoe(Loader& l, const Json& c) {
  auto& r = l.report();
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t e = need(c, "num_experts", r), inter = need(c, "intermediate_size", r);
  for (const char* k :
       {"num_attention_heads", "num_key_value_heads", "num_experts_per_tok", "vocab_size"}) {
    need(c, k, r);
  }
  if (!r.unloadable.empty()) return ok_status();
  // Dense tensors: looked up by name, any float dtype, no element count (olmoe.c's load_t).
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
    l.float_tensor(n, 0);
  }
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    for (const char* n :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "mlp.gate.weight"}) {
      l.float_tensor(p + n, 0);
    }
    for (std::uint64_t x = 0; x < e; ++x) {
      merged_expert(l, fmt::format("{}mlp.experts.{}.", p, x), {3 * inter * d},
                    [&](std::uint64_t) { return 2 * inter + d; });
    }
  }
  return ok_status();
}

Status check_qwen36(Loader& l, const Json& c, const Json& meta) {
  auto& r = l.report();
  const std::uint64_t d = need(c, "hidden_size", r), layers = need(c, "num_hidden_layers", r);
  const std::uint64_t v = need(c, "vocab_size", r);
  if (!c.contains("rms_norm_eps") || !c["rms_norm_eps"].is_number()) {
    r.unloadable.push_back("config.json: missing or non-numeric \"rms_norm_eps\"");
  }
  if (!meta.is_object()) r.unloadable.push_back("qwen36_meta.json: missing");
  if (!r.unloadable.empty()) return ok_status();
  if (meta_or(meta, "n_layers", 0) != layers) {
    r.unloadable.push_back(
        "qwen36_meta.json: n_layers differs from config.json's num_hidden_layers");
  }
  const std::uint64_t e = meta_or(meta, "num_experts", 256),
                      inter = meta_or(meta, "moe_inter", 512);
  const std::uint64_t shared = meta_or(meta, "shared_inter", 512);
  const std::uint64_t qh = meta_or(meta, "q_heads", d / 16),
                      kvh = meta_or(meta, "kv_heads", qh / 8);
  const std::uint64_t hd = meta_or(meta, "head_dim", qh ? d / qh : 0);
  const std::uint64_t qhd = meta_or(meta, "q_head_dim", 2 * hd),
                      khd = meta_or(meta, "k_head_dim", hd);
  const std::uint64_t o_in = meta_or(meta, "o_in", qh * hd);
  const std::uint64_t gs = meta_or(meta, "expert_gs", 0),
                      dbits = meta_or(meta, "expert_down_bits", 0);
  const std::uint64_t dgs = dbits ? meta_or(meta, "expert_down_gs", 0) : gs;
  const std::uint64_t vh = meta_or(meta, "dn_vheads", 0);
  const std::uint64_t vd = meta_or(meta, "dn_vdim", 0), convk = meta_or(meta, "dn_convk", 0);
  const std::uint64_t conv_dim = meta_or(meta, "dn_conv_dim", 0);
  std::vector<bool> attn(layers);
  const bool typed = meta.contains("layer_types") && meta["layer_types"].is_array();
  for (std::uint64_t i = 0; i < layers; ++i) {
    attn[i] = typed ? i < meta["layer_types"].size() && meta["layer_types"][i] == "full_attention"
                    : i % 4 == 3;
  }
  if (o_in != qh * hd || khd != hd || qhd < hd) {
    r.unloadable.push_back(
        "qwen36_meta.json: o_in must be q_heads x head_dim and k_head_dim "
        "head_dim (the forward assumes both)");
  }
  l.float_tensor("model.embed_tokens.weight", v * d);
  l.float_tensor("lm_head.weight", v * d);
  l.float_tensor("model.norm.weight", d);
  const auto gcount = [](std::uint64_t cols, std::uint64_t g) { return g ? ceil_div(cols, g) : 1; };
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    if (attn[i]) {
      l.float_tensor(p + "self_attn.q_proj.weight", d * qh * qhd);
      l.float_tensor(p + "self_attn.k_proj.weight", d * kvh * khd);
      l.float_tensor(p + "self_attn.v_proj.weight", d * kvh * khd);
      l.float_tensor(p + "self_attn.o_proj.weight", o_in * d);
      l.float_tensor(p + "self_attn.q_norm.weight", hd, false);
      l.float_tensor(p + "self_attn.k_norm.weight", hd, false);
    } else {
      l.float_tensor(p + "linear_attn.in_proj_qkv.weight", d * conv_dim);
      l.float_tensor(p + "linear_attn.in_proj_z.weight", d * vh * vd);
      l.float_tensor(p + "linear_attn.in_proj_b.weight", vh * d);
      l.float_tensor(p + "linear_attn.in_proj_a.weight", vh * d);
      l.float_tensor(p + "linear_attn.conv1d.weight", conv_dim * convk);
      l.float_tensor(p + "linear_attn.dt_bias", vh);
      l.float_tensor(p + "linear_attn.A_log", vh);
      l.float_tensor(p + "linear_attn.norm.weight", vd);
      l.float_tensor(p + "linear_attn.out_proj.weight", vh * vd * d);
    }
    if (e == 0) continue;
    l.float_tensor(p + "mlp.gate.weight", e * d);
    if (shared > 0) {
      l.float_tensor(p + "mlp.shared_expert.gate_proj.weight", d * shared);
      l.float_tensor(p + "mlp.shared_expert.up_proj.weight", d * shared);
      l.float_tensor(p + "mlp.shared_expert.down_proj.weight", d * shared);
    }
    const std::uint64_t n = inter * d;
    for (std::uint64_t x = 0; x < e; ++x) {
      merged_expert(
          l, fmt::format("{}mlp.experts.{}.", p, x), {3 * n, 3 * n / 2, 2 * n},
          [&](std::uint64_t) { return 2 * inter * gcount(d, gs) + d * gcount(inter, dgs); });
    }
  }
  return ok_status();
}

}  // namespace

Result<const Target*> recorded_target(const std::string& dir) {
  const std::string p = (fs::path(dir) / "qrepack.json").string();
  if (path_kind(p) == PathKind::kMissing) return static_cast<const Target*>(nullptr);
  QR_ASSIGN_OR_RETURN(m, read_json_file(p, ErrorKind::kInvalidConfig, std::uint64_t{1} << 30));
  if (!m.is_object() || !m.contains("target") || !m["target"].is_object() ||
      !m["target"].contains("name") || !m["target"]["name"].is_string()) {
    return static_cast<const Target*>(nullptr);
  }
  QR_ASSIGN_OR_RETURN(t, target_by_name(m["target"]["name"].get<std::string>()));
  return t;
}

Result<TargetLoadReport> check_load_target(const std::string& dir, const Target& t) {
  TargetLoadReport r;
  // The overlays are mounted beside a checkpoint that holds the config and carry none: the
  // Qwen3.8 one describes itself in qwen38_meta.json, the Inkling one in its __metadata__.
  const char* described_by = t.id == TargetId::kColibriQwen38Int4     ? "qwen38_meta.json"
                             : t.id == TargetId::kColibriInklingDense ? nullptr
                                                                      : "config.json";
  Json config;
  if (described_by) {
    QR_ASSIGN_OR_RETURN(j, read_json(dir, described_by, true));
    config = std::move(j);
  }
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(dir));
  Loader l(ck, r);
  switch (t.id) {
    case TargetId::kColibriLlama:
      QR_TRY(check_llama(l, config));
      break;
    case TargetId::kColibriQwen3: {
      QR_ASSIGN_OR_RETURN(meta, read_json(dir, "qwen3_meta.json", false));
      QR_TRY(check_qwen3(l, config, meta));
      break;
    }
    case TargetId::kColibriOlmoe:
      QR_TRY(check_olmoe(l, config));
      break;
    case TargetId::kColibriQwen36: {
      QR_ASSIGN_OR_RETURN(meta, read_json(dir, "qwen36_meta.json", false));
      QR_TRY(check_qwen36(l, config, meta));
      break;
    }
    case TargetId::kColibriGlm53:
      QR_TRY(check_glm53(l, config));
      break;
    case TargetId::kColibriQwen38Int4:
      QR_TRY(check_qwen38_int4(l, config));
      break;
    case TargetId::kColibriInkling:
      QR_TRY(check_inkling(l, config));
      break;
    case TargetId::kColibriInklingDense:
      QR_TRY(check_inkling_dense(l, config));
      break;
    case TargetId::kColibriKimiK3:
      QR_TRY(check_kimi_k3(l, config));
      break;
    default:
      return Error(ErrorKind::kInternal, fmt::format("{} has no container check", t.name));
  }
  return r;
}

}  // namespace qrepack
