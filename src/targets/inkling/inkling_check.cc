// check-load for the Inkling containers, as c/inkling.c loads them (reference/colibri-engines.md
// §1.13):
//   colibri-inkling        load_cfg's keys (its defaults where a key is absent), the tensors
//                          model_init looks up by name (load_w: any float, read whole; load_t:
//                          widened to f32; the scalars' capacity of one element), and the routed
//                          experts: container mode when the first MoE layer's gate_up_proj is
//                          U8/I8, rows of H or H/2 bytes (gate_up) and I or I/2 (down), per-row
//                          .qs, every MoE layer alike.
//   colibri-inkling-dense  the overlay alone: each U8/I8 tensor with a .qs must pass the byte /
//                          scale-count tests load_w_quant applies, with the original element
//                          count taken from its __metadata__ orig= dims (the main snapshot holds
//                          the tensor itself); a geometry the engine reads as the other format
//                          is unloadable, one it does not recognise falls back to bf16 there.
#include <fmt/format.h>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {
namespace {

// inkling.c's jnum for a count: the key's number, else its default.
std::uint64_t jnum(const Json& o, const char* key, std::uint64_t fallback) {
  if (o.is_object() && o.contains(key) && o[key].is_number_unsigned() &&
      o[key].get<std::uint64_t>() <= kMaxDim) {
    return o[key].get<std::uint64_t>();
  }
  return fallback;
}

// The string at i of a list, when there is one (inkling.c's LT_STR).
const std::string* list_string(const Json& o, const char* key, std::uint64_t i) {
  if (!o.contains(key) || !o[key].is_array() || i >= o[key].size() || !o[key][i].is_string())
    return nullptr;
  return o[key][i].get_ptr<const std::string*>();
}

bool is_byte(Dtype d) { return d == Dtype::kU8 || d == Dtype::kI8; }

struct Cfg {
  std::uint64_t d, layers, vocab, heads, kv, hd, swa_heads, swa_kv, swa_hd, window, d_rel, ext, k,
      experts, shared, moe_inter, dense_inter;
  std::vector<bool> local, sparse;
};

Cfg load_cfg(const Json& root) {
  const Json& r =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  Cfg c{};
  c.d = jnum(r, "hidden_size", 6144);
  c.layers = jnum(r, "num_hidden_layers", 66);
  c.vocab = jnum(r, "vocab_size", 201024);
  c.heads = jnum(r, "num_attention_heads", 64);
  c.kv = jnum(r, "num_key_value_heads", 8);
  c.hd = jnum(r, "head_dim", 128);
  c.swa_heads = jnum(r, "swa_num_attention_heads", c.heads);
  c.swa_kv = jnum(r, "swa_num_key_value_heads", 16);
  c.swa_hd = jnum(r, "swa_head_dim", c.hd);
  c.window = jnum(r, "sliding_window_size", 512);
  c.d_rel = jnum(r, "d_rel", 16);
  c.ext = jnum(r, "rel_extent", 1024);
  c.k = jnum(r, "sconv_kernel_size", jnum(r, "conv_kernel_size", 4));
  c.experts = jnum(r, "n_routed_experts", 256);
  c.shared = jnum(r, "n_shared_experts", 2);
  if (r.contains("dense_intermediate_size") && r["dense_intermediate_size"].is_number()) {
    c.dense_inter = jnum(r, "dense_intermediate_size", 0);
    c.moe_inter = jnum(r, "intermediate_size", 3072);
  } else {
    c.dense_inter = jnum(r, "intermediate_size", 24576);
    c.moe_inter = jnum(r, "moe_intermediate_size", 3072);
  }
  const std::uint64_t dense_idx = jnum(r, "dense_mlp_idx", 0);
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(c.layers, 256); ++i) {
    if (const std::string* t = list_string(r, "layer_types", i)) {
      c.local.push_back(*t == "hybrid_sliding");
    } else if (r.contains("local_layer_ids") && r["local_layer_ids"].is_array()) {
      bool local = false;
      for (const Json& x : r["local_layer_ids"]) local = local || (x.is_number() && x == i);
      c.local.push_back(local);
    } else {
      c.local.push_back((i + 1) % 6 != 0);
    }
    if (const std::string* t = list_string(r, "mlp_layer_types", i)) {
      c.sparse.push_back(*t == "sparse");
    } else {
      c.sparse.push_back(i >= dense_idx);
    }
  }
  return c;
}

// The scalar load_scalar reads into one float: absent is fine, more than one element is not.
void scalar(Loader& l, const std::string& name) {
  const auto t = l.ck().find(name);
  if (!t) return;
  if (!is_float(t->entry->dtype) || t->entry->numel() != 1) {
    l.bad(name, "load_scalar reads one float element (st_read_f32_cap capacity 1)");
  } else {
    ++l.report().checked;
  }
}

// The routed experts of MoE layer `i`: what slot fills read. `mode` is the first MoE layer's
// (container or float), `rb13` / `rb2` its row bytes.
void experts(Loader& l, const Cfg& c, std::uint64_t i, bool container, std::uint64_t rb13,
             std::uint64_t rb2) {
  const std::string p = fmt::format("model.layers.{}.mlp.experts.", i);
  const std::uint64_t e = c.experts, in = c.moe_inter, d = c.d;
  const auto gu = l.get(p + "gate_up_proj"), dn = l.get(p + "down_proj");
  if (!gu || !dn) return;
  if (!container) {
    for (const auto& [t, n] : {std::pair{gu, e * 2 * in * d}, std::pair{dn, e * d * in}}) {
      if (!is_float(t->entry->dtype) || t->entry->numel() != n) {
        l.bad(std::string(t->entry->name),
              fmt::format("float experts of {} elements expected (the first MoE "
                          "layer holds float experts)",
                          n));
      } else {
        ++l.report().checked;
      }
    }
    return;
  }
  if (!is_byte(gu->entry->dtype) || !is_byte(dn->entry->dtype)) {
    l.bad(std::string(gu->entry->name),
          "the first MoE layer is a U8/I8 container; this layer is not");
    return;
  }
  if (gu->entry->byte_size() != e * 2 * in * rb13 || dn->entry->byte_size() != e * d * rb2) {
    l.bad(std::string(gu->entry->name),
          fmt::format("{} + {} bytes; the first MoE layer's row sizes imply {} + {}",
                      gu->entry->byte_size(), dn->entry->byte_size(), e * 2 * in * rb13,
                      e * d * rb2));
    return;
  }
  for (const auto& [name, n] :
       {std::pair{p + "gate_up_proj.qs", e * 2 * in}, std::pair{p + "down_proj.qs", e * d}}) {
    const auto qs = l.get(name);
    if (!qs) continue;
    if (!is_float(qs->entry->dtype) || qs->entry->numel() != n) {
      l.bad(name, fmt::format("{} row scales expected (one per row of every expert)", n));
    } else {
      ++l.report().checked;
    }
  }
  l.report().checked += 2;
}

}  // namespace

Status check_inkling(Loader& l, const Json& config) {
  auto& r = l.report();
  const Cfg c = load_cfg(config);
  if (c.layers > 256) {
    r.unloadable.push_back("config.json: num_hidden_layers over inkling.c's MAXL (256)");
    return ok_status();
  }
  const std::uint64_t d = c.d;
  l.float_tensor("model.embed_tokens.weight", c.vocab * d);
  l.float_tensor("model.embed_norm.weight", d, false);
  l.float_tensor("model.norm.weight", d);
  l.float_tensor("lm_head.weight", c.vocab * d);
  if (l.ck().find("model.audio.encoder.weight")) {
    l.float_tensor("model.audio.encoder.weight", 0);
    l.float_tensor("model.audio.final_norm.weight", d);
  }
  std::optional<std::size_t> first_moe;
  for (std::uint64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    const std::uint64_t nh = c.local[i] ? c.swa_heads : c.heads;
    const std::uint64_t kv = c.local[i] ? c.swa_kv : c.kv, hd = c.local[i] ? c.swa_hd : c.hd;
    l.float_tensor(p + "input_layernorm.weight", d);
    l.float_tensor(p + "post_attention_layernorm.weight", d);
    l.float_tensor(p + "self_attn.q_proj.weight", nh * hd * d);
    l.float_tensor(p + "self_attn.k_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.v_proj.weight", kv * hd * d);
    l.float_tensor(p + "self_attn.r_proj.weight", nh * c.d_rel * d);
    l.float_tensor(p + "self_attn.o_proj.weight", d * nh * hd);
    l.float_tensor(p + "self_attn.q_norm.weight", hd);
    l.float_tensor(p + "self_attn.k_norm.weight", hd);
    l.float_tensor(p + "self_attn.rel_logits_proj.proj", c.d_rel * (c.local[i] ? c.window : c.ext));
    l.float_tensor(p + "self_attn.k_sconv.conv1d.weight", kv * hd * c.k);
    l.float_tensor(p + "self_attn.v_sconv.conv1d.weight", kv * hd * c.k);
    l.float_tensor(p + "attn_sconv.conv1d.weight", d * c.k);
    l.float_tensor(p + "mlp_sconv.conv1d.weight", d * c.k);
    if (!c.sparse[i]) {
      l.float_tensor(p + "mlp.gate_proj.weight", c.dense_inter * d);
      l.float_tensor(p + "mlp.up_proj.weight", c.dense_inter * d);
      l.float_tensor(p + "mlp.down_proj.weight", d * c.dense_inter);
      scalar(l, p + "mlp.global_scale");
      continue;
    }
    if (!first_moe) first_moe = i;
    l.float_tensor(p + "mlp.gate.weight", (c.experts + c.shared) * d);
    l.float_tensor(p + "mlp.gate.e_score_correction_bias", c.experts);
    scalar(l, p + "mlp.gate.global_scale");
    for (const char* x : {"gate_proj", "up_proj"}) {
      l.float_tensor(p + "mlp.shared_experts." + x, c.shared * c.moe_inter * d);
    }
    l.float_tensor(p + "mlp.shared_experts.down_proj", c.shared * d * c.moe_inter);
  }
  if (!first_moe) return ok_status();
  // Container detection on the first MoE layer, as model_init does.
  const auto gu = l.ck().find(fmt::format("model.layers.{}.mlp.experts.gate_up_proj", *first_moe));
  const auto dn = l.ck().find(fmt::format("model.layers.{}.mlp.experts.down_proj", *first_moe));
  const bool container = gu && is_byte(gu->entry->dtype);
  std::uint64_t rb13 = 0, rb2 = 0;
  if (container && dn && c.experts && c.moe_inter) {
    rb13 = gu->entry->byte_size() / (c.experts * 2 * c.moe_inter);
    rb2 = dn->entry->byte_size() / (c.experts * d);
    if (rb13 != d && rb13 * 2 != d) {
      r.unloadable.push_back(
          fmt::format("{}: unsupported container row size {} (hidden_size {} or half of it)",
                      gu->entry->name, rb13, d));
      return ok_status();
    }
    if (rb2 != c.moe_inter && rb2 * 2 != c.moe_inter) {
      r.unloadable.push_back(fmt::format("{}: container row size {} vs {} columns (unpack_rows)",
                                         dn->entry->name, rb2, c.moe_inter));
      return ok_status();
    }
  }
  for (std::uint64_t i = *first_moe; i < c.layers; ++i) {
    if (c.sparse[i]) experts(l, c, i, container, rb13, rb2);
  }
  return ok_status();
}

Status check_inkling_dense(Loader& l, const Json&) {
  auto& r = l.report();
  const Checkpoint& ck = l.ck();
  if (ck.tensors().empty()) {
    r.unloadable.push_back("the overlay holds no tensor (inkling.c then ignores it)");
    return ok_status();
  }
  for (const TensorRef t : ck.tensors()) {
    const TensorEntry& e = *t.entry;
    if (e.name.ends_with(".qs")) continue;
    if (!is_byte(e.dtype)) {  // raw: the engine reads these from the main snapshot
      ++r.checked;
      continue;
    }
    const auto qs = ck.find(std::string(e.name) + ".qs");
    if (!qs) {
      ++r.checked;  // no scales: load_w_quant leaves it to the main snapshot
      continue;
    }
    const auto& meta = ck.shards()[t.shard].header().metadata;
    const auto m = meta.find(std::string(e.name));
    const std::string_view text =
        m == meta.end() ? std::string_view() : std::string_view(m->second);
    const std::size_t at = text.find("orig=");
    std::uint64_t orig = 1;
    bool parsed = at != std::string_view::npos && at + 5 < text.size();
    if (parsed) {
      std::string_view dims = text.substr(at + 5);
      dims = dims.substr(0, dims.find(';'));
      std::uint64_t v = 0;
      bool digit = false;
      for (std::size_t k = 0; k <= dims.size() && parsed; ++k) {
        if (k < dims.size() && dims[k] >= '0' && dims[k] <= '9' && v <= kMaxDim) {
          v = v * 10 + static_cast<std::uint64_t>(dims[k] - '0');
          digit = true;
        } else if ((k == dims.size() || dims[k] == 'x') && digit && v <= kMaxDim) {
          const auto p = checked_mul(orig, v);
          parsed = p.has_value();
          orig = p.value_or(0);
          v = 0;
          digit = false;
        } else {
          parsed = false;
        }
      }
    }
    if (!parsed) {
      l.bad(std::string(e.name), "no orig=<dims> in __metadata__: its element count is unknown");
      continue;
    }
    const bool int8_meta = text.starts_with("fmt=1");
    const std::uint64_t nbytes = e.byte_size(), nqs = qs->entry->numel();
    // load_w_quant's tests, in its order.
    const bool as_int8 = nbytes == orig && nqs * 64 < nbytes;
    const bool as_int4 = !as_int8 && nbytes * 2 >= orig && nbytes * 2 <= orig + 2 * nqs;
    if (!is_float(qs->entry->dtype)) {
      l.bad(std::string(qs->entry->name), "scales must be F32, BF16 or F16");
    } else if ((as_int8 && !int8_meta) || (as_int4 && int8_meta)) {
      l.bad(std::string(e.name),
            fmt::format("{} bytes and {} scales for {} elements read as {} by load_w_quant, but "
                        "written as {}",
                        nbytes, nqs, orig, as_int8 ? "int8" : "int4-gs64",
                        int8_meta ? "int8" : "int4-gs64"));
    } else {
      ++r.checked;  // used as written, or (neither test) the engine falls back to bf16
    }
  }
  return ok_status();
}

}  // namespace qrepack
