#include "qrepack/model/model_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <unordered_map>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {

struct ModelWeights::State {
  Checkpoint ck;
  Recognized rec;
  std::unordered_map<std::string, std::size_t> by_name;  ///< logical weight -> rec.weights
  FormatStamps stamps;
};

namespace {

Error weight_error(ErrorKind kind, const std::string& dir, const std::string& name,
                   std::string message) {
  return std::move(Error(kind, std::move(message)).in_file(dir).in_tensor(name));
}

// Tensor `name` as stored, or an error naming it.
Result<TensorRef> stored_tensor(const Checkpoint& ck, const std::string& name) {
  const auto t = ck.find(name);
  if (!t) {
    return weight_error(ErrorKind::kMissingTensors, ck.directory(), name,
                        "the model needs this tensor; the checkpoint does not hold it");
  }
  return *t;
}

}  // namespace

ModelWeights::ModelWeights(std::unique_ptr<State> s) : s_(std::move(s)) {}
ModelWeights::ModelWeights(ModelWeights&&) noexcept = default;
ModelWeights& ModelWeights::operator=(ModelWeights&&) noexcept = default;
ModelWeights::~ModelWeights() = default;

Result<ModelWeights> ModelWeights::open(const std::string& path) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(path));
  QR_ASSIGN_OR_RETURN(cfg, load_moe_config(ck.directory()));
  return open_recognized(std::move(ck), cfg ? &*cfg : nullptr);
}

Result<ModelWeights> ModelWeights::open_by_names(const std::string& path) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(path));
  return open_recognized(std::move(ck), nullptr);
}

Result<ModelWeights> ModelWeights::open_as_stored(const std::string& path) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(path));
  return open_recognized(std::move(ck), nullptr, true);
}

Result<ModelWeights> ModelWeights::open_recognized(Checkpoint ck, const MoeConfig* cfg,
                                                   bool as_stored) {
  QR_ASSIGN_OR_RETURN(stamps, read_format_stamps(ck));
  auto state = std::make_unique<State>(State{std::move(ck), {}, {}, std::move(stamps)});
  QR_ASSIGN_OR_RETURN(
      rec, recognize_weights(state->ck, cfg, RecognizeWeights::kKeep,
                             as_stored ? RecognizeNames::kAsStored : RecognizeNames::kDetect));
  state->rec = std::move(rec);
  for (std::size_t i = 0; i < state->rec.weights.size(); ++i) {
    state->by_name.emplace(state->rec.weights[i].name, i);
  }
  return ModelWeights(std::move(state));
}

const std::string& ModelWeights::directory() const { return s_->ck.directory(); }
std::vector<std::string> ModelWeights::files() const { return s_->ck.files(); }

bool ModelWeights::has_tensor(const std::string& name) const {
  return s_->ck.find(name).has_value();
}

std::optional<ModelWeights::Stored> ModelWeights::stored(const std::string& name) const {
  const auto t = s_->ck.find(name);
  if (!t) return std::nullopt;
  return Stored{t->entry->dtype, {t->entry->shape.begin(), t->entry->shape.end()}};
}

Result<std::vector<std::uint8_t>> ModelWeights::read_stored_bytes(const std::string& name,
                                                                  std::uint64_t offset,
                                                                  std::uint64_t n) const {
  QR_ASSIGN_OR_RETURN(t, stored_tensor(s_->ck, name));
  const std::uint64_t size = t.entry->byte_size();
  if (offset > size || n > size - offset) {
    return weight_error(
        ErrorKind::kUnexpectedShape, s_->ck.directory(), name,
        fmt::format("bytes [{}, {}) of a {}-byte tensor", offset, offset + n, size));
  }
  std::vector<std::uint8_t> out(n);
  QR_TRY(s_->ck.read(t, offset, out));
  return out;
}

Result<ModelWeights::Raw> ModelWeights::read_raw(const std::string& name,
                                                 std::uint64_t max_bytes) const {
  const std::string& dir = s_->ck.directory();
  QR_ASSIGN_OR_RETURN(t, stored_tensor(s_->ck, name));
  const std::uint64_t n = t.entry->byte_size();
  if (n > max_bytes) {
    return weight_error(
        ErrorKind::kUnexpectedShape, dir, name,
        fmt::format("{} bytes where the model's dims allow at most {}", n, max_bytes));
  }
  Raw r{t.entry->dtype, std::vector<std::uint8_t>(n)};
  QR_TRY(s_->ck.read(t, 0, r.bytes));
  return r;
}

Result<std::vector<float>> ModelWeights::read_floats(const std::string& name,
                                                     std::uint64_t elements) const {
  return read_leading_floats(name, elements, elements);
}

Result<std::vector<float>> ModelWeights::read_leading_floats(const std::string& name,
                                                             std::uint64_t elements,
                                                             std::uint64_t max_elements) const {
  const std::string& dir = s_->ck.directory();
  QR_ASSIGN_OR_RETURN(t, stored_tensor(s_->ck, name));
  const Dtype d = t.entry->dtype;
  const std::uint64_t width = d == Dtype::kF32 ? 4 : 2, bytes = t.entry->byte_size();
  if ((d != Dtype::kF32 && d != Dtype::kBF16 && d != Dtype::kF16) || bytes % width != 0 ||
      bytes / width < elements || bytes / width > max_elements) {
    return weight_error(
        ErrorKind::kUnexpectedShape, dir, name,
        fmt::format("the model needs {} BF16, F16 or F32 values; it is {} of {} bytes",
                    elements == max_elements ? fmt::format("{}", elements)
                                             : fmt::format("{} to {}", elements, max_elements),
                    dtype_info(d).name, bytes));
  }
  std::vector<std::uint8_t> raw(elements * width);
  QR_TRY(s_->ck.read(t, 0, raw));
  std::vector<float> out(elements);
  for (std::uint64_t i = 0; i < elements; ++i) {
    const std::uint8_t* p = raw.data() + i * width;
    if (d == Dtype::kF32) {
      std::memcpy(&out[i], p, 4);
    } else {
      const auto code = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
      out[i] = d == Dtype::kBF16 ? bf16_decode(code) : f16_decode(code);
    }
    if (!std::isfinite(out[i])) {
      return weight_error(ErrorKind::kNonFiniteWeight, dir, name,
                          fmt::format("element {} is not finite", i));
    }
  }
  return out;
}

Result<Matrix> ModelWeights::read_stored_rows(const std::string& name, std::uint64_t rows,
                                              std::uint64_t cols, std::uint64_t row0,
                                              std::uint64_t n) const {
  const std::string& dir = s_->ck.directory();
  QR_ASSIGN_OR_RETURN(t, stored_tensor(s_->ck, name));
  const Dtype d = t.entry->dtype;
  const std::uint64_t width = d == Dtype::kF32 ? 4 : 2;
  const auto elements = checked_mul(rows, cols);
  const auto want = elements ? checked_mul(*elements, width) : std::nullopt;
  if ((d != Dtype::kF32 && d != Dtype::kBF16 && d != Dtype::kF16) || !want ||
      t.entry->byte_size() != *want) {
    return weight_error(ErrorKind::kUnexpectedShape, dir, name,
                        fmt::format("the model needs {} x {} BF16, F16 or F32 values; it is {} of "
                                    "{} bytes",
                                    rows, cols, dtype_info(d).name, t.entry->byte_size()));
  }
  if (row0 > rows || n > rows - row0) {
    return weight_error(ErrorKind::kInternal, dir, name,
                        fmt::format("rows [{}, {}) of a {}-row tensor", row0, row0 + n, rows));
  }
  std::vector<std::uint8_t> raw(n * cols * width);
  QR_TRY(s_->ck.read(t, row0 * cols * width, raw));
  Matrix m{n, cols, std::vector<float>(n * cols)};
  for (std::uint64_t i = 0; i < m.v.size(); ++i) {
    const std::uint8_t* p = raw.data() + i * width;
    if (d == Dtype::kF32) {
      std::memcpy(&m.v[i], p, 4);
    } else {
      const auto code = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
      m.v[i] = d == Dtype::kBF16 ? bf16_decode(code) : f16_decode(code);
    }
    if (!std::isfinite(m.v[i])) {
      return weight_error(ErrorKind::kNonFiniteWeight, dir, name,
                          fmt::format("row {} holds a non-finite value", row0 + i / cols));
    }
  }
  return m;
}

bool ModelWeights::has(const std::string& name) const {
  return s_->by_name.contains(name) || (s_->ck.find(name) && s_->ck.find(name + ".qs"));
}

Result<Matrix> ModelWeights::read(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                                  std::uint64_t row0, std::uint64_t n) const {
  const std::string& dir = s_->ck.directory();
  if (row0 > rows || n > rows - row0) {
    return weight_error(ErrorKind::kInternal, dir, name,
                        fmt::format("rows [{}, {}) of a {}-row weight", row0, row0 + n, rows));
  }
  // Every shape is checked against the stored bytes before anything is allocated, so memory is
  // bounded by the file (a config cannot ask for more than the tensor holds).
  Matrix m;
  const auto t = s_->ck.find(name);
  const auto qs = s_->ck.find(name + ".qs");
  if (t && qs) {
    const auto cf = resolve_container_format(rows, cols, t->entry->byte_size(),
                                             qs->entry->byte_size(), find_stamp(s_->stamps, name));
    if (!cf.ok()) {
      return weight_error(ErrorKind::kUnexpectedShape, dir, name,
                          fmt::format("the engine would not load it for the model's [{}, {}]: {}",
                                      rows, cols, cf.error().message()));
    }
    m = Matrix{n, cols, std::vector<float>(n * cols)};
    QR_TRY(read_container_rows(s_->ck, *t, *qs, *cf, cols, row0, n, m.v));
  } else {
    const auto w = s_->by_name.find(name);
    if (w == s_->by_name.end()) {
      return weight_error(ErrorKind::kMissingTensors, dir, name,
                          "the model needs this weight; the checkpoint does not hold it");
    }
    const LogicalWeight& lw = s_->rec.weights[w->second];
    if (WeightReader::rows_of(lw) != rows || WeightReader::cols_of(lw) != cols) {
      return weight_error(
          ErrorKind::kUnexpectedShape, dir, name,
          fmt::format("stored as {} x {}, the config implies {} x {}", WeightReader::rows_of(lw),
                      WeightReader::cols_of(lw), rows, cols));
    }
    m = Matrix{n, cols, std::vector<float>(n * cols)};
    WeightReader reader(s_->ck, s_->rec.block_rows, s_->rec.block_cols);
    QR_TRY(reader.open(lw));
    QR_TRY(reader.read_rows(row0, n, m.v));
  }
  for (std::uint64_t i = 0; i < m.v.size(); ++i) {
    if (!std::isfinite(m.v[i])) {
      return weight_error(ErrorKind::kNonFiniteWeight, dir, name,
                          fmt::format("row {} decodes to a non-finite value", row0 + i / cols));
    }
  }
  return m;
}

}  // namespace qrepack
