#include "qrepack/model/forward_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "model/forward_ops.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/model/decoder_forward.h"
#include "qrepack/model/deepseek_v4_forward.h"
#include "qrepack/model/glm53_forward.h"
#include "qrepack/model/glm_forward.h"
#include "qrepack/model/inkling_forward.h"
#include "qrepack/model/kimi_k3_forward.h"
#include "qrepack/model/qwen38_forward.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

// config.json's model_type (text_config's when the top level names none), or "" when the
// directory has no config.json.
Result<std::string> model_type_of(const std::string& dir) {
  const std::string p = (std::filesystem::path(dir) / "config.json").string();
  if (path_kind(p) == PathKind::kMissing) return std::string();
  QR_ASSIGN_OR_RETURN(text, read_small_file(p, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p));
  if (j->is_object() && j->contains("model_type") && (*j)["model_type"].is_string()) {
    return (*j)["model_type"].get<std::string>();
  }
  return std::string();
}

// The checkpoint's directory (a file's parent; a remote repository's base, opened once per
// process, so the pass's own open reuses it).
Result<std::string> directory_of(const std::string& path) {
  if (remote::is_remote_path(path)) return remote::open_remote_directory(path);
  if (path_kind(path) == PathKind::kDirectory) return path;
  return std::filesystem::path(path).parent_path().string();
}

}  // namespace

Result<TokenIds> ForwardModel::generate(const TokenIds& prompt, std::uint64_t n) {
  TokenIds seq = prompt;
  for (std::uint64_t k = 0; k < n; ++k) {
    QR_ASSIGN_OR_RETURN(l, logits({seq}));
    const Matrix& m = l[0];
    seq.push_back(model::argmax(std::span(m.row(m.rows - 1), m.cols)));
  }
  return TokenIds(seq.begin() + static_cast<std::ptrdiff_t>(prompt.size()), seq.end());
}

Result<std::unique_ptr<ForwardModel>> open_forward_model(const std::string& path,
                                                         const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(dir, directory_of(path));
  QR_ASSIGN_OR_RETURN(type, model_type_of(dir));
  if (type.empty() && !fallback_config_dir.empty()) {
    QR_ASSIGN_OR_RETURN(fallback, model_type_of(fallback_config_dir));
    type = fallback;
  }
  if (is_decoder_model_type(type)) {
    QR_ASSIGN_OR_RETURN(m, DecoderForward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<DecoderForward>(std::move(m)));
  }
  if (is_inkling_model_type(type)) {
    QR_ASSIGN_OR_RETURN(m, InklingForward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<InklingForward>(std::move(m)));
  }
  if (is_kimi_k3_model_type(type)) {
    QR_ASSIGN_OR_RETURN(m, KimiK3Forward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<KimiK3Forward>(std::move(m)));
  }
  if (is_glm53_model_type(type)) {
    QR_ASSIGN_OR_RETURN(m, Glm53Forward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<Glm53Forward>(std::move(m)));
  }
  // A Qwen3.8 experts-only directory without a fallback: the pass names what it needs (a
  // sidecar's snapshot is its parent).
  if (is_qwen38_model_type(type) || (type.empty() && is_qwen38_experts_directory(dir))) {
    QR_ASSIGN_OR_RETURN(m, Qwen38Forward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<Qwen38Forward>(std::move(m)));
  }
  if (is_deepseek_v4_forward_type(type)) {
    QR_ASSIGN_OR_RETURN(m, DeepseekV4Forward::open(path, fallback_config_dir));
    return std::unique_ptr<ForwardModel>(std::make_unique<DeepseekV4Forward>(std::move(m)));
  }
  QR_ASSIGN_OR_RETURN(m, GlmForward::open(path, fallback_config_dir));
  return std::unique_ptr<ForwardModel>(std::make_unique<GlmForward>(std::move(m)));
}

}  // namespace qrepack
