// plan_container: the container target's planner for a checkpoint (targets/planners.h).
#include <fmt/format.h>

#include "targets/container/planners.h"

namespace qrepack {

Result<ContainerPlan> plan_container(const Checkpoint& ck, const Target& t,
                                     const ContainerOptions& o) {
  Result<ContainerPlan> plan = Error(ErrorKind::kInternal, "no planner");
  switch (t.id) {
    case TargetId::kColibriQwen36:
      plan = plan_qwen36(ck, o);
      break;
    case TargetId::kColibriQwen3:
      plan = plan_qwen3_dense(ck, o);
      break;
    case TargetId::kColibriLlama:
      plan = plan_llama(ck, o);
      break;
    case TargetId::kColibriOlmoe:
      plan = plan_olmoe(ck, o);
      break;
    case TargetId::kColibriGlm53:
      plan = plan_glm53(ck, o);
      break;
    case TargetId::kColibriQwen38Int4:
      plan = plan_qwen38_int4(ck, o);
      break;
    case TargetId::kColibriQwen38Sidecar:
      plan = plan_qwen38_sidecar(ck, o);
      break;
    case TargetId::kColibriInkling:
      plan = plan_inkling(ck, o);
      break;
    case TargetId::kColibriInklingDense:
      plan = plan_inkling_dense(ck, o);
      break;
    case TargetId::kColibriKimiK3:
      plan = plan_kimi_k3(ck, o);
      break;
    case TargetId::kColibriGemma4:
      return Error(ErrorKind::kUsage,
                   "--target colibri-gemma4 packs the experts of a Gemma 4 GGUF (convert "
                   "MODEL.gguf); it does not read safetensors checkpoints")
          .with_rule("target.source");
    default:
      return Error(ErrorKind::kInternal,
                   fmt::format("--target {} is not a container target", t.name));
  }
  if (plan.ok()) plan->target = &t;
  return plan;
}

nlohmann::json gguf_run_parameters(std::string_view target, std::string_view to) {
  nlohmann::json p = {{"target", target}, {"to", to}, {"source_format", "gguf"}};
  for (const char* k :
       {"expert_bits", "down_bits", "down_group", "attn_bits", "mla_bits", "head_bits"}) {
    p[k] = 0;
  }
  return p;
}

}  // namespace qrepack
