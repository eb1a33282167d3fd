// What check_load_target's per-runtime checks share: the directory as the runtimes' shared
// safetensors reader sees it (Loader), config key reads, and each runtime's check, which lives
// in its folder (targets/<runtime>/*_check.cc).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/targets/check_load.h"

namespace qrepack {

using Json = nlohmann::json;

inline bool is_float(Dtype d) { return d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF32; }

// The directory as the runtimes' shared safetensors reader sees it, and the report.
class Loader {
 public:
  Loader(const Checkpoint& ck, TargetLoadReport& r) : ck_(ck), r_(r) {}

  std::optional<TensorRef> get(const std::string& name) {
    const auto t = ck_.find(name);
    if (!t) r_.missing.push_back(name);
    return t;
  }
  void bad(const std::string& name, const std::string& why) {
    r_.unloadable.push_back(fmt::format("{}: {}", name, why));
  }
  // A float tensor of exactly `numel` elements (load_t with its `want`).
  void float_tensor(const std::string& name, std::uint64_t numel, bool required = true) {
    const auto t = required ? get(name) : ck_.find(name);
    if (!t) return;
    if (!is_float(t->entry->dtype)) {
      bad(name, fmt::format("dtype {} is not BF16/F16/F32", dtype_info(t->entry->dtype).name));
    } else if (numel && t->entry->numel() != numel) {
      bad(name, fmt::format("{} elements, the config implies {}", t->entry->numel(), numel));
    } else {
      ++r_.checked;
    }
  }
  const Checkpoint& ck() const { return ck_; }
  TargetLoadReport& report() { return r_; }

 private:
  const Checkpoint& ck_;
  TargetLoadReport& r_;
};

inline  // A numeric key the loader requires (its "missing or non-numeric" refusal).
    std::uint64_t
    need(const Json& c, const char* key, TargetLoadReport& r, std::uint64_t fallback = 0,
         bool required = true) {
  if (c.contains(key) && c[key].is_number_unsigned() && c[key].get<std::uint64_t>() <= kMaxDim) {
    return c[key].get<std::uint64_t>();
  }
  if (required)
    r.unloadable.push_back(fmt::format("config.json: missing or non-numeric \"{}\"", key));
  return fallback;
}

/// A meta JSON key (at most kMaxDim), or `value` when absent or not a count.
std::uint64_t meta_or(const Json& meta, const char* key, std::uint64_t value);
/// An expert's merged_weight of `bytes` (any one of `accepted`) and .qs of `scales_for(bytes)`
/// elements.
void merged_expert(Loader& l, const std::string& base,
                   std::initializer_list<std::uint64_t> accepted,
                   const std::function<std::uint64_t(std::uint64_t)>& scales_for);

/// Each runtime's checks (targets/<runtime>/*_check.cc): what its loader would refuse, added to
/// the report.
Status check_llama(Loader& l, const Json& config);
Status check_qwen3(Loader& l, const Json& config, const Json& meta);
Status check_olmoe(Loader& l, const Json& config);
Status check_qwen36(Loader& l, const Json& config, const Json& meta);
/// GLM-5.3-Flash (c/glm53.c), the Qwen3.8 int4 overlay (qwen38_core.h), Inkling (c/inkling.c)
/// and its dense overlay: each adds what its loader would refuse to the report.
Status check_glm53(Loader& l, const Json& config);
Status check_qwen38_int4(Loader& l, const Json& config);
Status check_qwen38_sidecar(Loader& l, const Json& index);
Status check_inkling(Loader& l, const Json& config);
Status check_inkling_dense(Loader& l, const Json& config);
/// Kimi K3 (c/kimi_k3.c): the same loader reads the original release and the k3_repack.py
/// container.
Status check_kimi_k3(Loader& l, const Json& config);

}  // namespace qrepack
