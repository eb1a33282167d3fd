// libFuzzer target: config.json (strict JSON, the MoE config fields and caps, an MLX
// quantization block), then the weight list the coverage gate and check-load walk, when it is
// small enough to walk per input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "checkpoint/mlx_quantization.h"
#include "checkpoint/moe_config_json.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/moe_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto j = parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size),
                             ErrorKind::kInvalidConfig);
  if (!j.ok()) return 0;
  // An MLX block: every module entry is found again by its own path.
  if (auto q = mlx_quantization_from_json(*j); q.ok() && *q) {
    for (const auto& [path, params] : (*q)->modules) {
      if ((*q)->for_module(path).has_value() != params.has_value()) __builtin_trap();
    }
  }
  auto c = moe_config_from_json(*j);
  if (!c.ok()) return 0;
  const auto n = model_weight_count(*c);
  std::uint64_t seen = 0;
  if (n && *n <= 20'000) for_each_model_weight(*c, [&](const ModelWeight&) { ++seen; });
  if (n && *n <= 20'000 && seen != *n) __builtin_trap();  // the count must match the list
  return 0;
}
