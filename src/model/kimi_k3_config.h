// config.json of Kimi K3 for the forward pass: the dimensions c/kimi_k3.c's load_cfg requires
// (targets/kimi_k3/kimi_k3_contract.h reads them, with its range checks) and the numbers it
// reads besides; variants the pass does not implement refused under forward.support.
#pragma once

#include <string>

#include "qrepack/core/error.h"
#include "targets/kimi_k3/kimi_k3_contract.h"

namespace qrepack::model {

struct K3ForwardConfig {
  std::string model_type;  ///< config.json's top level ("kimi_k3", or "kimi_linear")
  K3Dims d;
  double eps = 1e-5;               ///< rms_norm_eps
  float gate_lower_bound = -5.0f;  ///< linear_attn_config.gate_lower_bound
  float situ_b1 = 0, situ_b2 = 0;  ///< activation_situ_beta, activation_situ_linear_beta
};

/// Reads `dir`/config.json (text_config when present, as load_cfg does).
Result<K3ForwardConfig> load_k3_forward_config(const std::string& dir);

}  // namespace qrepack::model
