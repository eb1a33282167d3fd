#include "model/decoder_experts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"

namespace qrepack::model {
namespace {

constexpr std::uint64_t kMaxMetaBytes = std::uint64_t{1} << 20;
constexpr const char* kProj[3] = {"gate_proj", "up_proj", "down_proj"};

Error expert_error(const ModelWeights& w, const std::string& name, std::string message) {
  return std::move(Error(ErrorKind::kUnexpectedShape, std::move(message))
                       .in_file(w.directory())
                       .in_tensor(name)
                       .with_rule("forward.merged_expert"));
}

std::uint64_t groups(std::uint64_t cols, std::uint64_t gs) { return gs ? ceil_div(cols, gs) : 1; }

// How one merged blob stores its codes and where each matrix's scales start.
struct MergedLayout {
  enum class Codes { kInt8, kNibbles, kMixed } codes;
  std::uint64_t gs = 0, down_gs = 0;  ///< 0: one scale per row
  NibbleCode nibbles = NibbleCode::kTwosComplement;
};

// The value of code `i` (a flat element index over gate | up | down) of a blob.
float code_at(const std::vector<std::uint8_t>& b, MergedLayout::Codes codes, NibbleCode nibbles,
              std::uint64_t n, std::uint64_t i) {
  const bool nibble =
      codes == MergedLayout::Codes::kNibbles || (codes == MergedLayout::Codes::kMixed && i < 2 * n);
  if (!nibble) {
    const std::uint64_t at = codes == MergedLayout::Codes::kMixed ? n + (i - 2 * n) : i;
    return static_cast<float>(static_cast<std::int8_t>(b[at]));
  }
  const std::uint8_t byte = b[i / 2];
  const int q = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  if (nibbles == NibbleCode::kOffsetBinary) return static_cast<float>(q - 8);
  return static_cast<float>(q >= 8 ? q - 16 : q);
}

struct ExpertDims {
  std::uint64_t hidden, inter;
  std::uint64_t n() const { return hidden * inter; }  ///< elements of one matrix
};

// Scales of gate | up | down at group size gs (gate, up) and dgs (down); 0 = one per row.
std::uint64_t scale_count(const ExpertDims& d, std::uint64_t gs, std::uint64_t dgs) {
  return 2 * d.inter * groups(d.hidden, gs) + d.hidden * groups(d.inter, dgs);
}

// The code layout a merged blob of `bytes` bytes of `dtype` holds, if any.
std::optional<MergedLayout::Codes> merged_codes(Dtype dtype, std::uint64_t bytes, std::uint64_t n) {
  if (dtype == Dtype::kI8 && bytes == 3 * n) return MergedLayout::Codes::kInt8;
  if (dtype == Dtype::kU8 && 2 * bytes == 3 * n) return MergedLayout::Codes::kNibbles;
  if (dtype == Dtype::kU8 && bytes == 2 * n) return MergedLayout::Codes::kMixed;
  return std::nullopt;
}

// Without a meta file the scale count picks the group size: per row (0), or the one power of
// two whose count it is (0 when none is; the caller's count check then refuses).
std::uint64_t implied_group_size(const ExpertDims& d, std::uint64_t nq) {
  std::uint64_t gs = 0;
  if (nq == scale_count(d, 0, 0)) return 0;
  for (std::uint64_t g = 1; g <= std::max(d.hidden, d.inter); g *= 2) {
    if (scale_count(d, g, g) == nq) gs = g;
  }
  return gs;
}

// Where a merged blob's weight decodes non-finite.
struct NonFinite {
  std::uint64_t matrix, row;
};

// gate, up and down as f32 codes x scales, or the first weight that decodes non-finite.
std::optional<NonFinite> decode_merged(const ExpertDims& d, const std::vector<std::uint8_t>& codes,
                                       const std::vector<float>& qs, const MergedLayout& lay,
                                       ExpertMatrices& m) {
  Matrix* mats[3] = {&m.gate, &m.up, &m.down};
  std::uint64_t scale0 = 0;
  for (std::uint64_t j = 0; j < 3; ++j) {
    const std::uint64_t rows = j == 2 ? d.hidden : d.inter, cols = j == 2 ? d.inter : d.hidden;
    const std::uint64_t gs = j == 2 ? lay.down_gs : lay.gs, per_row = groups(cols, gs);
    *mats[j] = Matrix{rows, cols, std::vector<float>(d.n())};
    for (std::uint64_t r = 0; r < rows; ++r) {
      for (std::uint64_t c = 0; c < cols; ++c) {
        const float s = qs[scale0 + r * per_row + (gs ? c / gs : 0)];
        const float v = code_at(codes, lay.codes, lay.nibbles, d.n(), j * d.n() + r * cols + c) * s;
        if (!std::isfinite(v)) return NonFinite{j, r};
        mats[j]->v[r * cols + c] = v;
      }
    }
    scale0 += rows * per_row;
  }
  return std::nullopt;
}

Status read_meta(const std::string& dir, std::uint64_t& gs, std::uint64_t& down_gs, bool& has) {
  const std::string p = (std::filesystem::path(dir) / "qwen36_meta.json").string();
  if (path_kind(p) == PathKind::kMissing) return ok_status();
  QR_ASSIGN_OR_RETURN(text, read_small_file(p, kMaxMetaBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p));
  const auto dim = [&](const char* key, std::uint64_t& out) -> Status {
    if (!j->contains(key)) return ok_status();
    const auto& v = (*j)[key];
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > kMaxDim) {
      return Error(ErrorKind::kInvalidConfig,
                   fmt::format("\"{}\" must be a non-negative integer <= {}", key, kMaxDim))
          .in_file(p)
          .with_rule("forward.merged_expert");
    }
    out = v.get<std::uint64_t>();
    return ok_status();
  };
  QR_TRY(dim("expert_gs", gs));
  down_gs = gs;
  QR_TRY(dim("expert_down_gs", down_gs));
  has = true;
  return ok_status();
}

}  // namespace

Result<ExpertSource> ExpertSource::make(const ModelWeights& w, std::string prefix,
                                        std::uint64_t hidden, std::uint64_t inter,
                                        NibbleCode nibbles) {
  ExpertSource s(w, std::move(prefix), hidden, inter);
  s.nibbles_ = nibbles;
  QR_TRY(read_meta(w.directory(), s.meta_gs_, s.meta_down_gs_, s.has_meta_));
  return s;
}

Result<Matrix> ExpertSource::read_named(std::uint64_t layer, std::uint64_t expert, const char* proj,
                                        std::uint64_t rows, std::uint64_t cols) const {
  // Per-expert tensors under the text prefix; a fused tensor's expert rows are recognized
  // under "model.layers." whatever the prefix.
  const std::string own =
      fmt::format("{}layers.{}.mlp.experts.{}.{}.weight", prefix_, layer, expert, proj);
  const std::string fused =
      fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, expert, proj);
  return w_->read_all(w_->has(own) || !w_->has(fused) ? own : fused, rows, cols);
}

Result<ExpertMatrices> ExpertSource::read(std::uint64_t layer, std::uint64_t expert) const {
  const std::string p = fmt::format("{}layers.{}.mlp.experts.{}.", prefix_, layer, expert);
  if (w_->has_tensor(p + "merged_weight")) return read_merged(p);
  ExpertMatrices m;
  QR_ASSIGN_OR_RETURN(g, read_named(layer, expert, kProj[0], inter_, hidden_));
  QR_ASSIGN_OR_RETURN(u, read_named(layer, expert, kProj[1], inter_, hidden_));
  QR_ASSIGN_OR_RETURN(d, read_named(layer, expert, kProj[2], hidden_, inter_));
  m.gate = std::move(g), m.up = std::move(u), m.down = std::move(d);
  return m;
}

Result<ExpertMatrices> ExpertSource::read_merged(const std::string& p) const {
  const ExpertDims d{hidden_, inter_};
  const std::string name = p + "merged_weight";
  QR_ASSIGN_OR_RETURN(raw, w_->read_raw(name, 3 * d.n()));
  MergedLayout lay;
  lay.nibbles = nibbles_;
  if (const auto codes = merged_codes(raw.dtype, raw.bytes.size(), d.n())) {
    lay.codes = *codes;
  } else {
    return expert_error(
        *w_, name,
        fmt::format("{} bytes fit no merged layout of an expert [{} x {}] "
                    "(I8 {}, U8 nibbles {}, U8 mixed {})",
                    raw.bytes.size(), inter_, hidden_, 3 * d.n(), 3 * d.n() / 2, 2 * d.n()));
  }
  QR_ASSIGN_OR_RETURN(qs_raw, w_->read_raw(p + "qs", 4 * scale_count(d, 1, 1)));
  const std::uint64_t nq = qs_raw.bytes.size() / 4;
  if (has_meta_) {
    lay.gs = meta_gs_;
    lay.down_gs = lay.codes == MergedLayout::Codes::kMixed ? meta_down_gs_ : meta_gs_;
  } else {
    lay.gs = lay.down_gs = implied_group_size(d, nq);
  }
  if (qs_raw.dtype != Dtype::kF32 || nq != scale_count(d, lay.gs, lay.down_gs)) {
    return expert_error(*w_, p + "qs",
                        fmt::format("{} {} scales where gate | up | down at group sizes {} / {} "
                                    "need {} F32",
                                    nq, dtype_info(qs_raw.dtype).name, lay.gs, lay.down_gs,
                                    scale_count(d, lay.gs, lay.down_gs)));
  }
  std::vector<float> qs(nq);
  std::memcpy(qs.data(), qs_raw.bytes.data(), nq * 4);
  ExpertMatrices m;
  if (const auto bad = decode_merged(d, raw.bytes, qs, lay, m)) {
    return expert_error(*w_, p + "qs",
                        fmt::format("a scale decodes to a non-finite weight (matrix {}, row {})",
                                    kProj[bad->matrix], bad->row));
  }
  return m;
}

}  // namespace qrepack::model
