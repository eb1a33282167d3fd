#include "model/kimi_k3_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config_keys.h"

namespace qrepack::model {
namespace {

using Json = nlohmann::json;

// What c/kimi_k3.c computes and these keys would change: each refused by name. The runtime
// ignores them, so a checkpoint that sets them is a model neither it nor this pass runs.
Status check_variants(const Json& t) {
  if (!present(t, "attn_res_block_size") || !present(t, "routed_expert_hidden_size")) {
    return forward_unsupported(
        "config.json has no attn_res_block_size / routed_expert_hidden_size: a Kimi Linear "
        "model (plain residuals, experts at full width), which the forward pass does not "
        "implement (it implements Kimi K3's attention residuals and latent MoE)");
  }
  if (present(t, "mla_use_nope") && !(t["mla_use_nope"].is_boolean() && t["mla_use_nope"])) {
    return forward_unsupported(
        "mla_use_nope is not true: MLA with rotary embeddings is not implemented (Kimi K3's "
        "MLA layers are NoPE, as c/kimi_k3.c runs them)");
  }
  if (present(t, "moe_router_activation_func") &&
      t["moe_router_activation_func"] != Json("sigmoid")) {
    return forward_unsupported(
        fmt::format("moe_router_activation_func {}: only \"sigmoid\" is implemented",
                    t["moe_router_activation_func"].dump().substr(0, 32)));
  }
  if (present(t, "moe_renormalize") && t["moe_renormalize"] != Json(true)) {
    return forward_unsupported(
        "moe_renormalize is not true: the router's weights are always renormalized");
  }
  if (present(t, "routed_scaling_factor") && !(t["routed_scaling_factor"].is_number() &&
                                               t["routed_scaling_factor"].get<double>() == 1.0)) {
    return forward_unsupported(fmt::format(
        "routed_scaling_factor {}: Kimi K3's routed experts are not scaled (1.0 or absent)",
        t["routed_scaling_factor"].dump().substr(0, 32)));
  }
  for (const char* key : {"num_expert_group", "n_group"}) {
    if (present(t, key) && !(t[key].is_number_unsigned() && t[key].get<std::uint64_t>() <= 1)) {
      return forward_unsupported(fmt::format(
          "{} {}: group-limited routing is not implemented (Kimi K3 routes over all experts)", key,
          t[key].dump().substr(0, 32)));
    }
  }
  return ok_status();
}

Status check_dims(const K3Dims& d) {
  const bool mla = std::find(d.kda.begin(), d.kda.end(), false) != d.kda.end();
  if (mla &&
      (d.heads == 0 || d.q_lora == 0 || d.kv_lora == 0 || d.v_head == 0 || d.nope + d.rope == 0)) {
    return forward_unsupported(fmt::format(
        "MLA layers with num_attention_heads {}, q_lora_rank {}, kv_lora_rank {}, "
        "qk_nope_head_dim + qk_rope_head_dim {}, v_head_dim {}: the pass implements the q_a / "
        "q_b low-rank query of Kimi K3 with every dimension positive",
        d.heads, d.q_lora, d.kv_lora, d.nope + d.rope, d.v_head));
  }
  if (d.first_dense > 0 && d.dense_inter == 0) {
    return forward_config_error(
        "intermediate_size is 0 while first_k_dense_replace names dense layers");
  }
  return ok_status();
}

}  // namespace

Result<K3ForwardConfig> load_k3_forward_config(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(f, read_model_config(dir));
  auto in_file = [&](Error e) { return std::move(e.in_file(f.path)); };
  const Json& root = f.root;
  const Json& t = f.text();
  K3ForwardConfig c;
  c.model_type = f.model_type;
  if (Status s = check_variants(t); !s.ok()) return in_file(std::move(s.error()));
  auto dims = read_k3_dims(root);
  if (!dims.ok()) return in_file(std::move(dims.error()));
  c.d = std::move(*dims);
  if (Status s = check_dims(c.d); !s.ok()) return in_file(std::move(s.error()));
  const Json& la = t["linear_attn_config"];
  auto eps = config_number(t, "rms_norm_eps", 1e-5);
  auto lb = config_number(la, "gate_lower_bound", -5.0);
  auto b1 = config_number(t, "activation_situ_beta", 0, NumberRange::kPositive);
  auto b2 = config_number(t, "activation_situ_linear_beta", 0, NumberRange::kPositive);
  for (auto* r : {&eps, &lb, &b1, &b2}) {
    if (!r->ok()) return in_file(std::move(r->error()));
  }
  if (*eps < 0) return in_file(forward_config_error("\"rms_norm_eps\" must not be negative"));
  c.eps = *eps;
  c.gate_lower_bound = static_cast<float>(*lb);
  c.situ_b1 = static_cast<float>(*b1);
  c.situ_b2 = static_cast<float>(*b2);
  return c;
}

}  // namespace qrepack::model
