// libFuzzer target: config.json (strict JSON, the MoE config fields and caps), then the
// weight list the coverage gate and check-load walk, when it is small enough to walk per input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "checkpoint/moe_config_json.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/moe_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto j = parse_json_strict(std::string_view(reinterpret_cast<const char*>(data), size),
                             ErrorKind::kInvalidConfig);
  if (!j.ok()) return 0;
  auto c = moe_config_from_json(*j);
  if (!c.ok()) return 0;
  const auto n = model_weight_count(*c);
  std::uint64_t seen = 0;
  if (n && *n <= 20'000) for_each_model_weight(*c, [&](const ModelWeight&) { ++seen; });
  if (n && *n <= 20'000 && seen != *n) __builtin_trap();  // the count must match the list
  return 0;
}
