// The weights of a model checkpoint as f32 matrices, whatever their storage: any float dtype,
// FP8 block-scaled (per-weight or fused experts), or a container qrepack writes (int8-row,
// int4-row, int4-gN with a ".qs" scale tensor), decoded the way the C engine decodes them
// (its byte-count format detection against the config's [O, I], then its table decoders).
// Rows are read on request, so a caller holds only what it asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/dtype.h"
#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

struct MoeConfig;

/// A row-major f32 matrix.
struct Matrix {
  std::uint64_t rows = 0, cols = 0;
  std::vector<float> v;
  const float* row(std::uint64_t r) const { return v.data() + r * cols; }
  float* row(std::uint64_t r) { return v.data() + r * cols; }
};

class ModelWeights {
 public:
  /// Opens the checkpoint at `path` (file or directory) and recognizes its tensors.
  static Result<ModelWeights> open(const std::string& path);
  /// The same without the family table: weights are recognized by their names and encodings
  /// alone (families qrepack converts but whose config the MoE reader does not parse).
  static Result<ModelWeights> open_by_names(const std::string& path);
  /// The same with every weight named exactly as stored (no name map: Kimi K3's release and
  /// container names are what its runtime reads).
  static Result<ModelWeights> open_as_stored(const std::string& path);
  ModelWeights(ModelWeights&&) noexcept;
  ModelWeights& operator=(ModelWeights&&) noexcept;
  ~ModelWeights();

  /// Whether the checkpoint holds weight `name` in any readable form.
  bool has(const std::string& name) const;
  /// Directory of the checkpoint (its config.json lives here).
  const std::string& directory() const;
  /// Every file the checkpoint was read from (what an output must never replace).
  std::vector<std::string> files() const;
  /// Rows [row0, row0 + n) of weight `name`, which must have `rows` x `cols` elements (a 1-D
  /// weight is one row). Errors name the tensor: missing, a shape other than expected, bytes
  /// that fit no engine layout, non-finite values.
  Result<Matrix> read(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                      std::uint64_t row0, std::uint64_t n) const;
  Result<Matrix> read_all(const std::string& name, std::uint64_t rows, std::uint64_t cols) const {
    return read(name, rows, cols, 0, rows);
  }
  /// A BF16 / F16 / F32 tensor of any rank holding exactly `elements` values, as f32 (a
  /// depthwise conv kernel [C, 1, K]). Errors name the tensor.
  Result<std::vector<float>> read_floats(const std::string& name, std::uint64_t elements) const;
  /// Rows [row0, row0 + n) of a BF16 / F16 / F32 tensor stored under exactly `name`, of any
  /// rank, viewed as [rows, cols] (its element count must be rows x cols): one expert's rows of
  /// a fused 3-D tensor, read without the rest. Errors name the tensor.
  Result<Matrix> read_stored_rows(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                                  std::uint64_t row0, std::uint64_t n) const;
  /// The first `elements` values of a BF16 / F16 / F32 tensor holding between `elements` and
  /// `max_elements` values (Kimi K3's A_log: the per-head values zero-padded to the head dim).
  Result<std::vector<float>> read_leading_floats(const std::string& name, std::uint64_t elements,
                                                 std::uint64_t max_elements) const;
  /// A tensor's stored bytes and dtype, at most `max_bytes` of them (a runtime's merged expert
  /// blob, decoded by the caller).
  struct Raw {
    Dtype dtype;
    std::vector<std::uint8_t> bytes;
  };
  Result<Raw> read_raw(const std::string& name, std::uint64_t max_bytes) const;
  /// Whether tensor `name` is stored under exactly that name.
  bool has_tensor(const std::string& name) const;
  /// The dtype and shape of tensor `name` as stored (nullopt: not stored under that name).
  struct Stored {
    Dtype dtype;
    std::vector<std::uint64_t> shape;
  };
  std::optional<Stored> stored(const std::string& name) const;
  /// Bytes [offset, offset + n) of tensor `name` as stored, checked against its size (one row
  /// of a table too large to read whole, such as Qwen3.8's n-gram embedding).
  Result<std::vector<std::uint8_t>> read_stored_bytes(const std::string& name, std::uint64_t offset,
                                                      std::uint64_t n) const;

 private:
  struct State;
  explicit ModelWeights(std::unique_ptr<State> s);
  static Result<ModelWeights> open_recognized(Checkpoint ck, const MoeConfig* cfg,
                                              bool as_stored = false);
  std::unique_ptr<State> s_;
};

}  // namespace qrepack
