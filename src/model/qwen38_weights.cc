#include "model/qwen38_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/core/checked.h"

namespace qrepack::model {
namespace {

constexpr const char* kProj[3] = {"gate_proj", "up_proj", "down_proj"};
constexpr std::uint64_t kSidecarGroup = 64;
constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{16} << 20;

Error expert_error(const std::string& dir, const std::string& name, std::string message) {
  return std::move(Error(ErrorKind::kUnexpectedShape, std::move(message))
                       .in_file(dir)
                       .in_tensor(name)
                       .with_rule("forward.merged_expert"));
}

// The 4-bit code of element c of a planar64-v8 row (`row`: ceil(cols / 2) bytes).
int planar_code(const std::uint8_t* row, std::uint64_t cols, std::uint64_t c) {
  const std::uint64_t body = cols / 64 * 64;
  if (c < body) {
    const std::uint64_t block = c / 64, k = c % 64;
    const std::uint8_t byte = row[block * 32 + k % 32];
    return k < 32 ? (byte & 0xF) : (byte >> 4);
  }
  const std::uint64_t t = c - body;
  const std::uint8_t byte = row[body / 2 + t / 2];
  return t % 2 == 0 ? (byte & 0xF) : (byte >> 4);
}

}  // namespace

bool is_q38_sidecar_dir(const std::string& dir) {
  const std::string p = (std::filesystem::path(dir) / "index.json").string();
  if (path_kind(p) != PathKind::kRegular) return false;
  auto text = read_small_file(p, kMaxIndexBytes, ErrorKind::kInvalidConfig);
  if (!text.ok()) return false;
  auto j = parse_json_strict(*text, ErrorKind::kInvalidConfig);
  return j.ok() && j->is_object() && j->contains("format") &&
         (*j)["format"] == nlohmann::json(kQ38SidecarFormat);
}

Result<Q38Weights> Q38Weights::make(ModelWeights base, std::optional<ModelWeights> experts,
                                    Q38ExpertStore store, std::uint64_t hidden, std::uint64_t inter,
                                    std::uint64_t n_experts) {
  // q38's probe: the multimodal release's prefix, else the text model's.
  std::string pfx;
  if (base.has_tensor("model.language_model.embed_tokens.weight")) {
    pfx = "model.language_model.";
  } else if (base.has_tensor("model.embed_tokens.weight")) {
    pfx = "model.";
  } else {
    return Error(ErrorKind::kMissingTensors,
                 "the checkpoint has no Qwen4-Exp text embedding (model.language_model."
                 "embed_tokens.weight or model.embed_tokens.weight)")
        .in_file(base.directory());
  }
  auto held = experts ? std::make_unique<ModelWeights>(std::move(*experts)) : nullptr;
  Q38Weights w(WeightCache(std::move(base)), std::move(held), store);
  w.pfx_ = std::move(pfx);
  w.hidden_ = hidden;
  w.inter_ = inter;
  w.n_experts_ = n_experts;
  if (store == Q38ExpertStore::kOverlay) {
    QR_ASSIGN_OR_RETURN(
        src, ExpertSource::make(*w.experts_, w.pfx_, hidden, inter, NibbleCode::kOffsetBinary));
    w.overlay_ = std::move(src);
  }
  return w;
}

std::vector<std::string> Q38Weights::files() const {
  std::vector<std::string> out = pass_input_files(w_.weights());
  if (experts_) {
    for (const std::string& f : experts_->files()) out.push_back(f);
  }
  return out;
}

Result<ExpertMatrices> Q38Weights::expert(std::uint64_t layer, std::uint64_t e) {
  const std::string key = fmt::format("q38-expert:{}:{}", layer, e);
  const std::string keys[3] = {key + ":gate", key + ":up", key + ":down"};
  if (auto g = w_.find(keys[0])) {
    return ExpertMatrices{*g, *w_.find(keys[1]), *w_.find(keys[2])};
  }
  Result<ExpertMatrices> m =
      store_ == Q38ExpertStore::kOverlay ? overlay_.read(layer, e) : release_expert(layer, e);
  if (!m.ok()) return m;
  w_.keep(keys[0], m->gate);
  w_.keep(keys[1], m->up);
  w_.keep(keys[2], m->down);
  return m;
}

Result<ExpertMatrices> Q38Weights::release_expert(std::uint64_t layer, std::uint64_t e) const {
  const std::string p = fmt::format("{}layers.{}.mlp.experts.", pfx_, layer);
  const std::uint64_t H = hidden_, I = inter_;
  ExpertMatrices m;
  Matrix* out[3] = {&m.gate, &m.up, &m.down};
  if (store_ == Q38ExpertStore::kSidecar) {
    for (int j = 0; j < 3; ++j) {
      QR_ASSIGN_OR_RETURN(x, sidecar_matrix(fmt::format("{}{}.{}.weight", p, e, kProj[j]),
                                            j == 2 ? H : I, j == 2 ? I : H));
      *out[j] = std::move(x);
    }
    return m;
  }
  const ModelWeights& w = w_.weights();
  if (w.has_tensor(p + "gate_up_proj")) {
    // One expert's rows of the fused tensors, read without the rest.
    QR_ASSIGN_OR_RETURN(
        g, w.read_stored_rows(p + "gate_up_proj", n_experts_ * 2 * I, H, e * 2 * I, I));
    QR_ASSIGN_OR_RETURN(
        u, w.read_stored_rows(p + "gate_up_proj", n_experts_ * 2 * I, H, e * 2 * I + I, I));
    QR_ASSIGN_OR_RETURN(d, w.read_stored_rows(p + "down_proj", n_experts_ * H, I, e * H, H));
    m.gate = std::move(g), m.up = std::move(u), m.down = std::move(d);
    return m;
  }
  for (int j = 0; j < 3; ++j) {
    QR_ASSIGN_OR_RETURN(x, w.read_all(fmt::format("{}{}.{}.weight", p, e, kProj[j]), j == 2 ? H : I,
                                      j == 2 ? I : H));
    *out[j] = std::move(x);
  }
  return m;
}

// One sidecar matrix: U8 codes [rows, ceil(cols / 2)] planar64-v8 and F32 scales
// [rows, ceil(cols / 64)], both sizes checked before anything is decoded.
Result<Matrix> Q38Weights::sidecar_matrix(const std::string& name, std::uint64_t rows,
                                          std::uint64_t cols) const {
  const std::string& dir = experts_->directory();
  const std::uint64_t row_bytes = (cols + 1) / 2, groups = ceil_div(cols, kSidecarGroup);
  QR_ASSIGN_OR_RETURN(codes, experts_->read_raw(name, rows * row_bytes));
  QR_ASSIGN_OR_RETURN(qs, experts_->read_raw(name + ".qs", rows * groups * 4));
  if (codes.dtype != Dtype::kU8 || codes.bytes.size() != rows * row_bytes) {
    return expert_error(dir, name,
                        fmt::format("{} {} bytes where [{} x {}] int4 codes need U8 {}",
                                    dtype_info(codes.dtype).name, codes.bytes.size(), rows, cols,
                                    rows * row_bytes));
  }
  if (qs.dtype != Dtype::kF32 || qs.bytes.size() != rows * groups * 4) {
    return expert_error(dir, name + ".qs",
                        fmt::format("{} {} bytes where [{} x {}] scales need F32",
                                    dtype_info(qs.dtype).name, qs.bytes.size(), rows, groups));
  }
  std::vector<float> scale(rows * groups);
  std::memcpy(scale.data(), qs.bytes.data(), qs.bytes.size());
  Matrix m{rows, cols, std::vector<float>(rows * cols)};
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = codes.bytes.data() + r * row_bytes;
    for (std::uint64_t c = 0; c < cols; ++c) {
      const float v =
          static_cast<float>(planar_code(row, cols, c) - 8) * scale[r * groups + c / kSidecarGroup];
      if (!std::isfinite(v)) {
        return expert_error(dir, name + ".qs",
                            fmt::format("row {} decodes to a non-finite weight", r));
      }
      m.v[r * cols + c] = v;
    }
  }
  return m;
}

}  // namespace qrepack::model
