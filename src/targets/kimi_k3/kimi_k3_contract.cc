// Kimi K3's tensor contract (targets/kimi_k3_contract.h), from c/kimi_k3.c's load_cfg,
// model_init and expert_table_init.
#include "targets/kimi_k3/kimi_k3_contract.h"

#include <fmt/format.h>

#include <utility>

#include "qrepack/checkpoint/moe_config.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

using Json = nlohmann::json;
using Entry = std::pair<std::string_view, K3Expect>;

Error k3_config_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("kimi_k3.config");
}

// A numeric key load_cfg requires (req_num), as a non-negative integer.
Result<std::uint64_t> need(const Json& c, const char* key) {
  if (!c.contains(key) || !c[key].is_number()) {
    return k3_config_error(fmt::format("config.json: missing or non-numeric \"{}\"", key));
  }
  if (!c[key].is_number_unsigned() || c[key].get<std::uint64_t>() > kMaxDim) {
    return k3_config_error(fmt::format("config.json: \"{}\" must be an integer in [0, {}], got {}",
                                       key, kMaxDim, c[key].dump().substr(0, 32)));
  }
  return c[key].get<std::uint64_t>();
}

Status need_number(const Json& c, const char* key) {
  if (c.contains(key) && c[key].is_number()) return ok_status();
  return k3_config_error(fmt::format("config.json: missing or non-numeric \"{}\"", key));
}

// load_cfg's "dimension out of range" test, and its AttnRes block cap.
Status check_ranges(const K3Dims& d) {
  const bool bad = d.hidden < 1 || d.hidden > 65536 || d.layers < 1 || d.layers > 128 ||
                   d.experts < 1 || d.experts > 4096 || d.topk < 1 || d.topk > 64 ||
                   d.topk > d.experts || d.vocab < 1 || d.vocab > (1u << 22) || d.kda_proj() < 1 ||
                   d.kda_proj() > (1u << 20) || d.conv_kernel < 1 || d.conv_kernel > 8 ||
                   d.latent < 32 || d.latent % 32 || d.moe_inter % 32 || d.res_block < 1 ||
                   d.kda_head_dim > 512 || d.kv_lora > 4096;
  if (bad) return k3_config_error("config.json: dimension out of range (kimi_k3.c's load_cfg)");
  if ((d.layers + d.res_block - 1) / d.res_block + 1 > 16) {
    return k3_config_error("config.json: more than 15 AttnRes blocks (attn_res_block_size)");
  }
  if (d.moe_inter == 0) return k3_config_error("config.json: moe_intermediate_size is 0");
  return ok_status();
}

Status read_kda_layers(const Json& la, K3Dims& d) {
  if (!la.contains("kda_layers") || !la["kda_layers"].is_array()) {
    return k3_config_error("config.json: missing linear_attn_config.kda_layers");
  }
  d.kda.assign(d.layers, false);
  for (const Json& v : la["kda_layers"]) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() < 1 ||
        v.get<std::uint64_t>() > d.layers) {
      return k3_config_error(
          fmt::format("config.json: linear_attn_config.kda_layers holds {}, outside [1, {}] "
                      "(the list is 1-based)",
                      v.dump().substr(0, 32), d.layers));
    }
    d.kda[v.get<std::uint64_t>() - 1] = true;
  }
  return ok_status();
}

std::vector<Entry> global_entries(const K3Dims& d) {
  const auto f = [](std::uint64_t n) { return K3Expect{K3Class::kFloat, n, 1, false}; };
  return {{"model.embed_tokens.weight", f(d.vocab * d.hidden)},
          {"model.norm.weight", f(d.hidden)},
          {"model.output_attn_res_norm.weight", f(d.hidden)},
          {"model.output_attn_res_proj.weight", f(d.hidden)},
          {"lm_head.weight", {K3Class::kHead, d.vocab, d.hidden, false}}};
}

void add_attention(const K3Dims& d, bool kda, std::vector<Entry>& e) {
  const auto f = [](std::uint64_t n) { return K3Expect{K3Class::kFloat, n, 1, false}; };
  const auto q = [](K3Class c, std::uint64_t o, std::uint64_t i) { return K3Expect{c, o, i}; };
  const std::uint64_t h = d.hidden, p = d.kda_proj(), hd = d.kda_head_dim;
  if (kda) {
    const K3Class b = K3Class::kBits;
    e.insert(e.end(), {{"self_attn.q_proj.weight", q(b, p, h)},
                       {"self_attn.k_proj.weight", q(b, p, h)},
                       {"self_attn.v_proj.weight", q(b, p, h)},
                       {"self_attn.g_proj.weight", q(b, p, h)},
                       {"self_attn.o_proj.weight", q(b, h, p)},
                       {"self_attn.q_conv1d.weight", f(p * d.conv_kernel)},
                       {"self_attn.k_conv1d.weight", f(p * d.conv_kernel)},
                       {"self_attn.v_conv1d.weight", f(p * d.conv_kernel)},
                       {"self_attn.f_a_proj.weight", f(hd * h)},
                       {"self_attn.f_b_proj.weight", f(p * hd)},
                       {"self_attn.b_proj.weight", f(d.kda_heads * h)},
                       {"self_attn.dt_bias", f(p)},
                       {"self_attn.o_norm.weight", f(hd)},
                       {"self_attn.A_log", {K3Class::kFloat, d.kda_heads, 1, true}}});
    return;
  }
  const K3Class m = K3Class::kMla;
  const std::uint64_t qk = d.nope + d.rope;
  e.insert(e.end(), {{"self_attn.q_a_proj.weight", q(m, d.q_lora, h)},
                     {"self_attn.q_b_proj.weight", q(m, d.heads * qk, d.q_lora)},
                     {"self_attn.kv_a_proj_with_mqa.weight", q(m, d.kv_lora + d.rope, h)},
                     {"self_attn.kv_b_proj.weight", q(m, d.heads * (d.nope + d.v_head), d.kv_lora)},
                     {"self_attn.o_proj.weight", q(m, h, d.heads * d.v_head)},
                     {"self_attn.g_proj.weight", q(m, d.heads * d.v_head, h)},
                     {"self_attn.q_a_layernorm.weight", f(d.q_lora)},
                     {"self_attn.kv_a_layernorm.weight", f(d.kv_lora)}});
}

void add_mlp(const K3Dims& d, bool sparse, std::vector<Entry>& e) {
  const auto f = [](std::uint64_t n) { return K3Expect{K3Class::kFloat, n, 1, false}; };
  const auto b = [](std::uint64_t o, std::uint64_t i) { return K3Expect{K3Class::kBits, o, i}; };
  const std::uint64_t h = d.hidden;
  if (!sparse) {
    e.insert(e.end(), {{"mlp.gate_proj.weight", b(d.dense_inter, h)},
                       {"mlp.up_proj.weight", b(d.dense_inter, h)},
                       {"mlp.down_proj.weight", b(h, d.dense_inter)}});
    return;
  }
  const std::uint64_t shared = d.moe_inter * d.shared;
  e.insert(e.end(), {{"block_sparse_moe.gate.weight", f(d.experts * h)},
                     {"block_sparse_moe.gate.e_score_correction_bias", f(d.experts)},
                     {"block_sparse_moe.routed_expert_norm.weight", f(d.latent)},
                     {"block_sparse_moe.routed_expert_down_proj.weight", b(d.latent, h)},
                     {"block_sparse_moe.routed_expert_up_proj.weight", b(h, d.latent)},
                     {"block_sparse_moe.shared_experts.gate_proj.weight", b(shared, h)},
                     {"block_sparse_moe.shared_experts.up_proj.weight", b(shared, h)},
                     {"block_sparse_moe.shared_experts.down_proj.weight", b(h, shared)}});
}

// The tensors of layer `l` after "model.layers.L." (experts apart).
std::vector<Entry> layer_entries(const K3Dims& d, std::uint64_t l) {
  const auto f = [](std::uint64_t n) { return K3Expect{K3Class::kFloat, n, 1, false}; };
  std::vector<Entry> e = {{"input_layernorm.weight", f(d.hidden)},
                          {"post_attention_layernorm.weight", f(d.hidden)},
                          {"self_attention_res_norm.weight", f(d.hidden)},
                          {"self_attention_res_proj.weight", f(d.hidden)},
                          {"mlp_res_norm.weight", f(d.hidden)},
                          {"mlp_res_proj.weight", f(d.hidden)}};
  add_attention(d, d.kda[l], e);
  add_mlp(d, d.sparse(l), e);
  return e;
}

// The expert tensor `k` of k3_repack.py's slot order (w1p w1s w2p w2s w3p w3s).
K3Expect expert_entry(const K3Dims& d, std::uint64_t k) {
  const bool down = k / 2 == 1;  // w2: latent rows over moe_inter columns
  const std::uint64_t o = down ? d.latent : d.moe_inter, i = down ? d.moe_inter : d.latent;
  return {K3Class::kExpert, o, k % 2 == 0 ? i / 2 : i / 32, false};
}

// "model.layers.L.<rest>": (L, rest).
std::optional<std::pair<std::uint64_t, std::string_view>> split_layer(std::string_view name) {
  return split_index(name, "model.layers.");
}

constexpr std::string_view kExperts = "block_sparse_moe.experts.";

}  // namespace

Result<K3Dims> read_k3_dims(const Json& config) {
  const Json& t = config.contains("text_config") && config["text_config"].is_object()
                      ? config["text_config"]
                      : config;
  K3Dims d;
  const std::pair<const char*, std::uint64_t*> keys[] = {{"hidden_size", &d.hidden},
                                                         {"num_hidden_layers", &d.layers},
                                                         {"vocab_size", &d.vocab},
                                                         {"first_k_dense_replace", &d.first_dense},
                                                         {"intermediate_size", &d.dense_inter},
                                                         {"num_attention_heads", &d.heads},
                                                         {"q_lora_rank", &d.q_lora},
                                                         {"kv_lora_rank", &d.kv_lora},
                                                         {"qk_nope_head_dim", &d.nope},
                                                         {"qk_rope_head_dim", &d.rope},
                                                         {"v_head_dim", &d.v_head},
                                                         {"num_experts", &d.experts},
                                                         {"num_experts_per_token", &d.topk},
                                                         {"moe_intermediate_size", &d.moe_inter},
                                                         {"routed_expert_hidden_size", &d.latent},
                                                         {"num_shared_experts", &d.shared},
                                                         {"attn_res_block_size", &d.res_block}};
  for (const auto& [key, into] : keys) {
    QR_ASSIGN_OR_RETURN(v, need(t, key));
    *into = v;
  }
  QR_TRY(need_number(t, "activation_situ_beta"));
  QR_TRY(need_number(t, "activation_situ_linear_beta"));
  if (!t.contains("linear_attn_config") || !t["linear_attn_config"].is_object()) {
    return k3_config_error("config.json: missing linear_attn_config");
  }
  const Json& la = t["linear_attn_config"];
  QR_ASSIGN_OR_RETURN(kh, need(la, "num_heads"));
  QR_ASSIGN_OR_RETURN(khd, need(la, "head_dim"));
  QR_ASSIGN_OR_RETURN(ck, need(la, "short_conv_kernel_size"));
  d.kda_heads = kh, d.kda_head_dim = khd, d.conv_kernel = ck;
  QR_TRY(check_ranges(d));
  QR_TRY(read_kda_layers(la, d));
  return d;
}

std::optional<K3Expect> k3_expect(std::string_view name, const K3Dims& d) {
  for (const auto& [n, e] : global_entries(d)) {
    if (n == name) return e;
  }
  const auto at = split_layer(name);
  if (!at || at->first >= d.layers) return std::nullopt;
  const auto [layer, rest] = *at;
  if (rest.starts_with(kExperts)) {
    const auto key = k3_expert_key(name);
    if (!key || !d.sparse(layer) || (*key)[0] >= d.experts) return std::nullopt;
    return expert_entry(d, (*key)[1] * 2 + (*key)[2]);
  }
  for (const auto& [n, e] : layer_entries(d, layer)) {
    if (n == rest) return e;
  }
  return std::nullopt;
}

void for_each_k3_tensor(const K3Dims& d,
                        const std::function<void(const std::string&, const K3Expect&)>& fn) {
  for (const auto& [n, e] : global_entries(d)) fn(std::string(n), e);
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const auto& [n, e] : layer_entries(d, l)) fn(p + std::string(n), e);
    if (!d.sparse(l)) continue;
    for (std::uint64_t x = 0; x < d.experts; ++x) {
      for (std::uint64_t k = 0; k < 6; ++k) {
        fn(fmt::format("{}{}{}.w{}.weight_{}", p, kExperts, x, k / 2 + 1,
                       k % 2 ? "scale" : "packed"),
           expert_entry(d, k));
      }
    }
  }
}

std::optional<std::array<std::uint64_t, 3>> k3_expert_key(std::string_view name) {
  const auto at = split_layer(name);
  if (!at || !at->second.starts_with(kExperts)) return std::nullopt;
  std::string_view rest = at->second.substr(kExperts.size());  // E.wK.weight_<kind>
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto e = name_index(rest.substr(0, dot));
  rest.remove_prefix(dot + 1);
  if (!e || rest.size() < 3 || rest[0] != 'w' || rest[1] < '1' || rest[1] > '3') {
    return std::nullopt;
  }
  const std::uint64_t mat = static_cast<std::uint64_t>(rest[1] - '1');
  rest.remove_prefix(2);
  if (rest == ".weight_packed") return std::array<std::uint64_t, 3>{*e, mat, 0};
  if (rest == ".weight_scale") return std::array<std::uint64_t, 3>{*e, mat, 1};
  return std::nullopt;
}

}  // namespace qrepack
