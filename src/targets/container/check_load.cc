// check_load_target: what each container runtime's loader checks when it opens a directory,
// read from the loaders' sources (c/llama.c, c/qwen3.c, c/olmoe.c, c/qwen36.c @ the commits
// reference/colibri-engines.md §8 names): the config and meta keys they require, the tensors
// they look up by name, and the element or byte counts they accept. Extra tensors are ignored,
// as the loaders ignore them.
#include "qrepack/targets/check_load.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "io/fs_util.h"
#include "io/json_file.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/checkpoint.h"
#include "targets/container/check_load_parts.h"
#include "targets/gemma4/gemma4_pack.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

Result<Json> read_json(const std::string& dir, const char* name, bool required) {
  const std::string p = (fs::path(dir) / name).string();
  if (path_kind(p) == PathKind::kMissing) {
    if (!required) return Json();
    return Error(ErrorKind::kInvalidConfig, fmt::format("{} is missing", name))
        .in_file(p)
        .with_rule("check_load.config");
  }
  QR_ASSIGN_OR_RETURN(j, read_json_file(p, ErrorKind::kInvalidConfig, kMaxConfigBytes));
  if (!j.is_object()) {
    return Error(ErrorKind::kInvalidConfig, "not a JSON object")
        .in_file(p)
        .with_rule("check_load.config");
  }
  return j;
}

}  // namespace

std::uint64_t meta_or(const Json& meta, const char* key, std::uint64_t value) {
  if (meta.is_object() && meta.contains(key) && meta[key].is_number_unsigned() &&
      meta[key].get<std::uint64_t>() <= kMaxDim) {
    return meta[key].get<std::uint64_t>();
  }
  return value;
}

// An expert's merged_weight of `bytes` (any one of `accepted`) and .qs of `scales` elements.
void merged_expert(Loader& l, const std::string& base,
                   std::initializer_list<std::uint64_t> accepted,
                   const std::function<std::uint64_t(std::uint64_t)>& scales_for) {
  const auto w = l.get(base + "merged_weight");
  const auto qs = l.get(base + "qs");
  if (!w || !qs) return;
  const std::uint64_t n = w->entry->byte_size();
  bool fits = false;
  for (std::uint64_t a : accepted) fits |= n == a;
  if (!fits) {
    l.bad(base + "merged_weight", fmt::format("{} bytes, none of the sizes the loader accepts", n));
    return;
  }
  if (qs->entry->numel() != scales_for(n) || !is_float(qs->entry->dtype)) {
    l.bad(base + "qs",
          fmt::format("{} elements, the loader expects {}", qs->entry->numel(), scales_for(n)));
    return;
  }
  l.report().checked += 2;
}

namespace {

// Whether `dir`'s manifest.json declares g4lab's expert-pack format: Gemma 4 packs carry no
// config.json, and one copied without qrepack.json is still theirs.
Result<bool> declares_gemma4_packs(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(m, read_json(dir, "manifest.json", false));
  return m.is_object() && m.contains("format") && m["format"].is_string() &&
         m["format"].get<std::string>() == "g4lab-expert-manifest-v2";
}

}  // namespace

Result<const Target*> recorded_target(const std::string& dir) {
  const std::string p = (fs::path(dir) / "qrepack.json").string();
  if (path_kind(p) == PathKind::kMissing) {
    QR_ASSIGN_OR_RETURN(gemma4, declares_gemma4_packs(dir));
    if (gemma4) return target_by_name("colibri-gemma4");
    return static_cast<const Target*>(nullptr);
  }
  QR_ASSIGN_OR_RETURN(m, read_json_file(p, ErrorKind::kInvalidConfig, std::uint64_t{1} << 30));
  if (!m.is_object() || !m.contains("target") || !m["target"].is_object() ||
      !m["target"].contains("name") || !m["target"]["name"].is_string()) {
    return static_cast<const Target*>(nullptr);
  }
  QR_ASSIGN_OR_RETURN(t, target_by_name(m["target"]["name"].get<std::string>()));
  return t;
}

Result<TargetLoadReport> check_load_target(const std::string& dir, const Target& t) {
  // Not a safetensors directory: manifest.json and its .g4ex packs beside a GGUF.
  if (t.id == TargetId::kColibriGemma4) return check_load_gemma4(dir);
  TargetLoadReport r;
  // The overlays are mounted beside a checkpoint that holds the config and carry none: the
  // Qwen3.8 one describes itself in qwen38_meta.json, the Inkling one in its __metadata__.
  const char* described_by = t.id == TargetId::kColibriQwen38Int4      ? "qwen38_meta.json"
                             : t.id == TargetId::kColibriQwen38Sidecar ? "index.json"
                             : t.id == TargetId::kColibriInklingDense  ? nullptr
                                                                       : "config.json";
  Json config;
  if (described_by) {
    QR_ASSIGN_OR_RETURN(j, read_json(dir, described_by, true));
    config = std::move(j);
  }
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(dir));
  Loader l(ck, r);
  switch (t.id) {
    case TargetId::kColibriLlama:
      QR_TRY(check_llama(l, config));
      break;
    case TargetId::kColibriQwen3: {
      QR_ASSIGN_OR_RETURN(meta, read_json(dir, "qwen3_meta.json", false));
      QR_TRY(check_qwen3(l, config, meta));
      break;
    }
    case TargetId::kColibriOlmoe:
      QR_TRY(check_olmoe(l, config));
      break;
    case TargetId::kColibriQwen36: {
      QR_ASSIGN_OR_RETURN(meta, read_json(dir, "qwen36_meta.json", false));
      QR_TRY(check_qwen36(l, config, meta));
      break;
    }
    case TargetId::kColibriGlm53:
      QR_TRY(check_glm53(l, config));
      break;
    case TargetId::kColibriQwen38Int4:
      QR_TRY(check_qwen38_int4(l, config));
      break;
    case TargetId::kColibriQwen38Sidecar:
      QR_TRY(check_qwen38_sidecar(l, config));
      break;
    case TargetId::kColibriInkling:
      QR_TRY(check_inkling(l, config));
      break;
    case TargetId::kColibriInklingDense:
      QR_TRY(check_inkling_dense(l, config));
      break;
    case TargetId::kColibriKimiK3:
      QR_TRY(check_kimi_k3(l, config));
      break;
    default:
      return Error(ErrorKind::kInternal, fmt::format("{} has no container check", t.name));
  }
  return r;
}

}  // namespace qrepack
