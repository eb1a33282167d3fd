// Inkling's config.json for the forward pass: the dims the targets already read strictly
// (targets/inkling/inkling_layout.h, load_cfg's keys and layer rules), the scalars the
// arithmetic needs with c/inkling.c's defaults, and the refusals of what the pass does not
// implement.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "io/fs_util.h"
#include "qrepack/core/checked.h"
#include "qrepack/model/inkling_forward.h"
#include "targets/container/planners.h"
#include "targets/inkling/inkling_layout.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr std::string_view kConfigRule = "forward.config";
// Every matrix the pass reads holds fewer elements than this (a config cannot make the
// element counts, or the byte counts computed from them, overflow).
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 48;

Error unsupported(const std::string& dir, std::string message) {
  return Error(ErrorKind::kUnsupportedModel, std::move(message))
      .in_file((fs::path(dir) / "config.json").string())
      .with_rule("forward.support");
}

// A number key: `fallback` when absent or null; else finite and in [lo, hi].
Result<double> scalar(const Json& t, const char* key, double fallback, double lo, double hi,
                      const std::string& dir) {
  QR_ASSIGN_OR_RETURN(v, config_number(t, key, dir, kConfigRule, fallback));
  if (!std::isfinite(v) || v < lo || v > hi) {
    return config_key_error(dir, fmt::format("\"{}\" is {}, not in [{}, {}]", key, v, lo, hi),
                            kConfigRule);
  }
  return v;
}

// The product of `dims`, or an error when it reaches kMaxElements.
Status bounded(std::initializer_list<std::uint64_t> dims, const char* what,
               const std::string& dir) {
  std::optional<std::uint64_t> n = 1;
  for (std::uint64_t d : dims) n = n ? checked_mul(*n, d) : std::nullopt;
  if (!n || *n >= kMaxElements) {
    return config_key_error(dir, fmt::format("{} would hold 2^48 elements or more", what),
                            kConfigRule);
  }
  return ok_status();
}

}  // namespace

bool is_inkling_model_type(const std::string& model_type) {
  return model_type == "inkling_mm_model" || model_type == "inkling" ||
         model_type == "inkling_text";
}

Result<InklingConfig> load_inkling_config(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(top, read_json_object((fs::path(dir) / "config.json").string(), kConfigRule));
  const Json& t = inkling_text_config(top);
  InklingConfig c;
  c.model_type = json_string(top, "model_type", "");
  if (!is_inkling_model_type(c.model_type)) {
    return unsupported(dir, fmt::format("model_type \"{}\" is not Inkling's", c.model_type));
  }
  // The activation first: nothing else matters for a model the runtime cannot compute.
  const std::string act = json_string(t, "hidden_act", "silu");
  if (act != "silu") {
    return unsupported(dir, fmt::format("hidden_act \"{}\": inkling.c computes SiLU-gated MLPs "
                                        "only",
                                        act.substr(0, 40)));
  }
  QR_ASSIGN_OR_RETURN(d, read_inkling_dims(top, dir));
  c.hidden = d.hidden, c.layers = d.layers, c.vocab = d.vocab;
  c.heads = d.heads, c.kv = d.kv, c.head_dim = d.head_dim;
  c.swa_heads = d.swa_heads, c.swa_kv = d.swa_kv, c.swa_head_dim = d.swa_head_dim;
  c.window = d.window, c.d_rel = d.d_rel, c.rel_extent = d.rel_extent, c.conv_kernel = d.conv_k;
  c.experts = d.experts, c.shared = d.shared, c.top_k = d.topk;
  c.moe_inter = d.moe_inter, c.dense_inter = d.dense_inter;
  c.sliding = d.sliding, c.sparse = d.sparse;
  QR_ASSIGN_OR_RETURN(unpadded, config_dim(t, "unpadded_vocab_size", dir, kConfigRule, c.vocab));
  if (unpadded > c.vocab) {
    return config_key_error(
        dir, fmt::format("unpadded_vocab_size {} exceeds vocab_size {}", unpadded, c.vocab),
        kConfigRule);
  }
  c.unpadded_vocab = unpadded;
  QR_ASSIGN_OR_RETURN(eps, scalar(t, "rms_norm_eps", 1e-6, 0, 1, dir));
  QR_ASSIGN_OR_RETURN(route, scalar(t, "route_scale", 8.0, 0, 1e6, dir));
  QR_ASSIGN_OR_RETURN(mup, scalar(t, "logits_mup_width_multiplier", 24.0, 1e-6, 1e6, dir));
  QR_ASSIGN_OR_RETURN(floor, scalar(t, "log_scaling_n_floor", 0, 0, 1e12, dir));
  QR_ASSIGN_OR_RETURN(alpha, scalar(t, "log_scaling_alpha", 0.1, -1e3, 1e3, dir));
  c.eps = static_cast<float>(eps), c.route_scale = static_cast<float>(route);
  c.mup = static_cast<float>(mup), c.log_floor = floor, c.log_alpha = static_cast<float>(alpha);

  for (std::uint64_t l = 0; l < c.layers; ++l) {
    const std::uint64_t h = c.heads_of(l), kv = c.kv_of(l), hd = c.head_dim_of(l);
    if (h % kv != 0) {
      return unsupported(dir, fmt::format("layer {}: {} query heads do not share {} key/value "
                                          "heads evenly",
                                          l, h, kv));
    }
    QR_TRY(bounded({h, hd, c.hidden}, "an attention projection", dir));
    QR_TRY(bounded({h, c.d_rel, c.hidden}, "r_proj", dir));
    QR_TRY(bounded({c.d_rel, c.extent_of(l)}, "rel_logits_proj", dir));
    QR_TRY(bounded({kv, hd, c.conv_kernel}, "a short convolution", dir));
  }
  QR_TRY(bounded({c.vocab, c.hidden}, "the embedding", dir));
  QR_TRY(bounded({c.hidden, c.conv_kernel}, "a short convolution", dir));
  QR_TRY(bounded({2, c.dense_inter, c.hidden}, "the dense MLP", dir));
  QR_TRY(bounded({c.experts + c.shared, 2, c.moe_inter, c.hidden}, "the experts", dir));
  return c;
}

}  // namespace qrepack
