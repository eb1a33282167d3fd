// check-load of colibri-qwen3: what c/qwen3.c's loader refuses (check_load_target).
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {

namespace {

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

}  // namespace

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

}  // namespace qrepack
