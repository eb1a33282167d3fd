// colibri-qwen3: the dense Qwen3 runtime's container (upstream convert_qwen3_dense.py;
// reference/colibri-engines.md §1.9). model-globals.safetensors (embed, lm_head when present,
// final norm) and one model-LLLLL.safetensors per layer; the seven projections of a layer as
// int4-g64 (U8 [O, ceil(I/2)], offset-binary, low nibble = even column, an odd row padded with
// nibble 8; scales F32 [O, ceil(I/64)], an all-zero group's 1.0), or, with --to f16, as F16;
// everything else F16 (an F32 tensor stays F32, an F16 one as stored); qwen3_meta.json with
// the dims qwen3.c reads. Every tensor name is checked against the layout qwen3.c loads.
#include <fmt/format.h>

#include <map>

#include "qrepack/core/checked.h"
#include "qrepack/schemes/scheme.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

constexpr std::string_view kRule = "qwen3.config";
constexpr std::array<std::string_view, 7> kBig = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight"};

struct Dims {
  std::uint64_t hidden, layers, heads, kv, head_dim, inter, vocab, max_pos;
  double rope_theta, rms_eps;
};

Result<Dims> read_dims(const nlohmann::ordered_json& c, const std::string& dir) {
  Dims d{};
  QR_ASSIGN_OR_RETURN(hidden, config_dim(c, "hidden_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(layers, config_dim(c, "num_hidden_layers", dir, kRule));
  QR_ASSIGN_OR_RETURN(heads, config_dim(c, "num_attention_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(kv, config_dim(c, "num_key_value_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(inter, config_dim(c, "intermediate_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(vocab, config_dim(c, "vocab_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(head_dim, config_dim(c, "head_dim", dir, kRule, hidden / heads));
  QR_ASSIGN_OR_RETURN(max_pos, config_dim(c, "max_position_embeddings", dir, kRule, 40960));
  // qwen3.c requires rms_norm_eps; the converter's meta defaults it, the loader does not.
  QR_ASSIGN_OR_RETURN(eps, config_number(c, "rms_norm_eps", dir, kRule));
  d = {hidden, layers, heads, kv, head_dim, inter, vocab, max_pos, 0.0, eps};
  std::optional<double> theta;
  if (c.contains("rope_theta") && !c["rope_theta"].is_null()) {
    QR_ASSIGN_OR_RETURN(t, config_number(c, "rope_theta", dir, kRule));
    theta = t;
  } else if (c.contains("rope_parameters") && c["rope_parameters"].is_object()) {
    const auto& r = c["rope_parameters"];
    if (r.contains("rope_theta") && !r["rope_theta"].is_null()) {
      QR_ASSIGN_OR_RETURN(t, config_number(r, "rope_theta", dir, kRule));
      theta = t;
    }
  }
  const std::string path = dir + "/config.json";
  if (!theta || *theta <= 0) {
    return Error(ErrorKind::kInvalidConfig,
                 "config.json has no positive rope_theta (checked the top level and "
                 "rope_parameters; qwen3.c would run with none)")
        .in_file(path)
        .with_rule("qwen3.rope_theta");
  }
  d.rope_theta = *theta;
  if (heads % kv != 0 || head_dim % 2 != 0 || layers > 512 || hidden > 65536) {
    return Error(ErrorKind::kInvalidConfig,
                 fmt::format("qwen3.c refuses these dims: heads {} over kv heads {}, head_dim {} "
                             "(even), layers {} (<= 512), hidden {} (<= 65536)",
                             heads, kv, head_dim, layers, hidden))
        .in_file(path)
        .with_rule(kRule);
  }
  if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty()) {
    bool dense = false;
    for (const auto& a : c["architectures"]) dense |= a.is_string() && a == "Qwen3ForCausalLM";
    if (!dense) {
      return Error(ErrorKind::kInvalidConfig,
                   fmt::format("not a dense Qwen3 checkpoint: architectures {}",
                               c["architectures"].dump().substr(0, 120)))
          .in_file(path)
          .with_rule("qwen3.architecture");
    }
  }
  return d;
}

// The shape qwen3.c reads for each tensor of the config (its load_wm / load_t).
TensorContract contract(const Dims& d) {
  TensorContract c;
  c.add("model.embed_tokens.weight", {d.vocab, d.hidden});
  c.add("model.norm.weight", {d.hidden});
  const std::uint64_t q = d.heads * d.head_dim, kv = d.kv * d.head_dim;
  c.per_layer(d.layers, "model.layers.{}.",
              {{"input_layernorm.weight", {d.hidden}},
               {"post_attention_layernorm.weight", {d.hidden}},
               {"self_attn.q_norm.weight", {d.head_dim}},
               {"self_attn.k_norm.weight", {d.head_dim}},
               {"self_attn.q_proj.weight", {q, d.hidden}},
               {"self_attn.k_proj.weight", {kv, d.hidden}},
               {"self_attn.v_proj.weight", {kv, d.hidden}},
               {"self_attn.o_proj.weight", {d.hidden, q}},
               {"mlp.gate_proj.weight", {d.inter, d.hidden}},
               {"mlp.up_proj.weight", {d.inter, d.hidden}},
               {"mlp.down_proj.weight", {d.hidden, d.inter}}});
  return c;
}

// How a tensor the converter keeps in float is stored: F32 and F16 as they are, anything else
// (BF16, FP8) as F16, as upstream's emit_f16 does.
void add_float(ContainerBuilder& b, const LogicalWeight& w, const std::string& name) {
  if (w.encoding == SourceEncoding::kFloat &&
      (w.source_dtype == Dtype::kF32 || w.source_dtype == Dtype::kF16)) {
    b.copy(w.data, name);
    b.count(fmt::format("float kept as {}", dtype_info(w.source_dtype).name));
    b.source(name, "keep", "qwen3.float_as_stored");
    return;
  }
  b.cast(w, Dtype::kF16, name);
  b.count("float stored as f16");
  b.source(w.source_name(), "convert", "qwen3.float_to_f16");
}

bool is_big(std::string_view name) {
  for (std::string_view s : kBig) {
    if (name.ends_with(s)) return true;
  }
  return false;
}

}  // namespace

Result<ContainerPlan> plan_qwen3_dense(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  std::uint64_t group = 0;
  if (o.scheme != "f16") {
    auto s = parse_scheme(o.scheme);
    if (!s.ok() || s->kind != SchemeKind::kInt4Group || s->group % 2 != 0) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--target colibri-qwen3 writes int4-g<N> (N even; default "
                               "int4-g64) or f16, not --to {}",
                               o.scheme))
          .with_rule("target.scheme");
    }
    group = s->group;
  }
  if (o.expert_bits || o.down_bits || o.down_group) {
    return Error(ErrorKind::kUsage, "--target colibri-qwen3 takes no --bits or --down-group")
        .with_rule("target.scheme");
  }
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-qwen3"));
  QR_ASSIGN_OR_RETURN(d, read_dims(config, dir));
  ContainerPlan plan;
  std::vector<std::string> problems;
  QR_ASSIGN_OR_RETURN(ix, start_plan(ck, plan, "qwen3", config, "qwen3", problems));
  TensorContract want = contract(d);
  bool lm_head = false;
  for (const auto& [name, w] : ix.by_name) {
    const std::string n(name);
    if (n == "lm_head.weight") {
      lm_head = true;
      if (std::vector<std::uint64_t>(w->shape) != std::vector<std::uint64_t>{d.vocab, d.hidden}) {
        problems.push_back(fmt::format("{}: shape [{}] is not [{}, {}]", n,
                                       fmt::join(w->shape, ", "), d.vocab, d.hidden));
      }
      continue;
    }
    if (n == "model.rotary_emb.inv_freq" || n.ends_with(".rotary_emb.inv_freq")) continue;
    want.check(n, std::vector<std::uint64_t>(w->shape), problems);
  }
  want.report_missing(problems);
  if (!problems.empty()) {
    std::sort(problems.begin(), problems.end());
    return unknown_tensors_error(dir, "colibri-qwen3 (qwen3.c)", problems);
  }
  ContainerBuilder b(plan);
  b.file("model-globals.safetensors");
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
    if (std::string_view(n) == "lm_head.weight" && !lm_head) continue;
    add_float(b, *ix.by_name.at(n), n);
  }
  QuantRule rule;
  rule.bits = 4;
  rule.group = group;
  rule.byte_rows = true;
  rule.zero_group_scale_one = true;
  rule.amax_floor = 0.0f;
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    b.file(fmt::format("model-{:05d}.safetensors", l));
    const std::string p = fmt::format("model.layers.{}.", l);
    const auto& all = want.tensors();
    for (auto it = all.lower_bound(p); it != all.end() && it->first.starts_with(p); ++it) {
      const LogicalWeight& w = *ix.by_name.at(it->first);
      if (group == 0 || !is_big(it->first)) {
        add_float(b, w, it->first);
        continue;
      }
      const std::uint64_t rows = w.shape[0], cols = w.shape[1];
      b.quant({{&w, rule}}, it->first, Dtype::kU8, {rows, (cols + 1) / 2}, it->first + ".qs",
              {rows, ceil_div(cols, group)});
      b.count(fmt::format("projections int4-g{}", group));
      b.source(w.source_name(), "convert", "qwen3.projection_int4");
    }
  }
  for (const auto& [name, w] : ix.by_name) {
    if (name.ends_with(".rotary_emb.inv_freq")) {
      b.source(w->source_name(), "drop", "qwen3.rotary_buffer");
    }
  }
  b.sort_files_for_alignment();
  nlohmann::ordered_json meta;
  meta["model_type"] = plan.model_type;
  meta["hidden"] = d.hidden;
  meta["n_layers"] = d.layers;
  meta["q_heads"] = d.heads;
  meta["kv_heads"] = d.kv;
  meta["head_dim"] = d.head_dim;
  meta["o_in"] = d.heads * d.head_dim;
  meta["inter"] = d.inter;
  meta["vocab"] = d.vocab;
  meta["rope_theta"] = d.rope_theta;
  meta["rms_eps"] = d.rms_eps;
  meta["max_position_embeddings"] = d.max_pos;
  meta["bits"] = group ? 4 : 0;
  meta["gs"] = group;
  plan.side_files.push_back({"qwen3_meta.json", python_json(meta, 2), "", ""});
  copy_side_files(plan, dir, {"config.json", "tokenizer.json"});
  add_generation_config(plan, dir, config);
  return plan;
}

}  // namespace qrepack
