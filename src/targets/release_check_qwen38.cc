// check-load for Qwen3.8-Flash-Next's official FP8 release (model_type qwen4_exp), which
// c/qwen38.c runs as downloaded. The list is derived from the release layout as qrepack's
// `qwen38-fp8` fixture and the colibri-qwen38-int4 contract know it (make_qwen38_tiny.py
// --fp8-experts, reference/colibri-engines.md §1.5, §1.16), not read from c/qwen38.c's
// loader: text keys under text_config; the text prefix model.language_model. (else model.);
// per layer by layer_types a Gated DeltaNet (linear_attn.*) or a sparse-attention layer
// (self_attn.{q,k,v,o}_proj, q/k norms, the indexer's index_qk_proj); hyper-connections; a
// router, a shared expert and its gate; every routed expert's gate/up/down F8_E4M3 [O, I] with
// a BF16 (or F32) weight_scale_inv [ceil(O/128), ceil(I/128)]. Dense tensors BF16/F16/F32 of
// the config's shapes where the config implies one. MTP and vision tensors are not read.
#include <fmt/format.h>

#include "qrepack/checkpoint/glm_moe.h"
#include "targets/release_check.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kBlock = 128;

struct Q38 {
  std::uint64_t hidden, layers, heads, kv_heads, head_dim, experts, inter, shared, vocab;
  std::vector<bool> linear;
};

bool read_config(const Json& t, TargetLoadReport& r, Q38& q) {
  q.hidden = release_key(t, {"hidden_size"}, r);
  q.layers = release_key(t, {"num_hidden_layers"}, r);
  q.heads = release_key(t, {"num_attention_heads"}, r);
  q.kv_heads = release_key(t, {"num_key_value_heads"}, r);
  q.head_dim = release_key(t, {"head_dim"}, r);
  q.experts = release_key(t, {"num_experts"}, r);
  release_key(t, {"num_experts_per_tok"}, r);
  q.inter = release_key(t, {"moe_intermediate_size"}, r);
  q.shared = release_key(t, {"shared_expert_intermediate_size"}, r);
  q.vocab = release_key(t, {"vocab_size"}, r);
  if (!r.unloadable.empty()) return false;
  if (!t.contains("layer_types") || !t["layer_types"].is_array() ||
      t["layer_types"].size() != q.layers) {
    r.unloadable.push_back("config.json: layer_types must list every layer");
    return false;
  }
  for (const auto& x : t["layer_types"]) {
    q.linear.push_back(x.is_string() && x.get<std::string>().find("linear") != std::string::npos);
  }
  return true;
}

void floats(Loader& l, const std::string& name, std::uint64_t numel = 0) {
  l.float_tensor(name, numel);
}

void attention(Loader& l, const Q38& q, const std::string& p, bool linear) {
  if (linear) {
    for (const char* n : {"in_proj_qkvz.weight", "in_proj_ba.weight", "conv1d.weight", "A_log",
                          "dt_bias", "norm.weight", "out_proj.weight"}) {
      floats(l, p + "linear_attn." + n);
    }
    return;
  }
  const std::uint64_t h = q.hidden, qd = q.heads * q.head_dim, kd = q.kv_heads * q.head_dim;
  floats(l, p + "self_attn.q_proj.weight", qd * h);
  floats(l, p + "self_attn.k_proj.weight", kd * h);
  floats(l, p + "self_attn.v_proj.weight", kd * h);
  floats(l, p + "self_attn.o_proj.weight", h * qd);
  floats(l, p + "self_attn.q_norm.weight", q.head_dim);
  floats(l, p + "self_attn.k_norm.weight", q.head_dim);
  floats(l, p + "self_attn.indexer.index_qk_proj.weight");
}

void layer(Loader& l, const Q38& q, const std::string& p, bool linear) {
  const std::uint64_t h = q.hidden;
  floats(l, p + "input_layernorm.weight", h);
  floats(l, p + "post_attention_layernorm.weight", h);
  for (const char* n : {"attn_hyper_connection.proj.weight", "mlp_hyper_connection.proj.weight",
                        "hyper_connection_mixer.weight"}) {
    floats(l, p + n);
  }
  attention(l, q, p, linear);
  floats(l, p + "mlp.gate.weight", q.experts * h);
  floats(l, p + "mlp.shared_expert.gate_proj.weight", q.shared * h);
  floats(l, p + "mlp.shared_expert.up_proj.weight", q.shared * h);
  floats(l, p + "mlp.shared_expert.down_proj.weight", h * q.shared);
  floats(l, p + "mlp.shared_expert_gate.weight", h);
  for (std::uint64_t e = 0; e < q.experts; ++e) {
    const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = proj[0] == 'd';
      const std::string w = fmt::format("{}{}.weight", x, proj);
      release_fp8(l, w, w + "_scale_inv", down ? h : q.inter, down ? q.inter : h, kBlock,
                  {Dtype::kBF16, Dtype::kF32});
    }
  }
}

}  // namespace

Status check_qwen38_release(const ReleaseInput& in, Loader& l) {
  auto& r = l.report();
  const Json& t = release_text_config(in.config);
  Q38 q{};
  if (!read_config(t, r, q)) return ok_status();
  if (q.layers * (q.experts * 6 + 40) > kMaxModelWeights) {
    r.unloadable.push_back("config.json: more tensors than qrepack checks");
    return ok_status();
  }
  const std::string p =
      l.ck().find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  floats(l, p + "embed_tokens.weight", q.vocab * q.hidden);
  floats(l, p + "norm.weight", q.hidden);
  floats(l, "lm_head.weight", q.vocab * q.hidden);
  for (std::uint64_t i = 0; i < q.layers; ++i) {
    layer(l, q, fmt::format("{}layers.{}.", p, i), q.linear[i]);
  }
  return ok_status();
}

}  // namespace qrepack
