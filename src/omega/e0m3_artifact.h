// The omega_e0m3_v1 artifact's content before it is written, and its two containers: the
// torch .pt dict of reference/flashrt_omega.md §3.4 and a safetensors file holding the same
// tensors (<layer>.packed, <layer>.sfb, <layer>.<aux tensor>) with every scalar in
// __metadata__.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt.h"
#include "qrepack/omega/e0m3_convert.h"

namespace qrepack {

struct E0m3Layer {
  std::string name;
  std::uint64_t n = 0, k = 0;
  const PtValue* record = nullptr;      ///< the pack record (aux fields are copied from it)
  std::vector<float> act_scale_static;  ///< fold actnorm: s, f32 [K]
  float act_out_scale = 0;              ///< fold actnorm: c
};

/// One record's outputs while the artifact is written (reused from record to record).
struct E0m3Workspace {
  std::size_t layer = SIZE_MAX;   ///< the layer whose sfb (and fp16) these are
  RawVector<std::uint16_t> fp16;  ///< the (folded) weight, when held whole (--keep-fp16)
  RawVector<std::uint8_t> sfb;
  /// The pipeline's per-slot buffers: a block of rows' fp16 and packed bytes.
  std::vector<RawVector<std::uint16_t>> slot_fp16;
  std::vector<RawVector<std::uint8_t>> slot_packed;
};

struct E0m3Artifact {
  const TorchFile* pack = nullptr;
  std::string fold;
  std::uint64_t source_record_count = 0;
  bool keep_fp16 = false;             ///< layers carry their (folded) fp16 weight
  bool act_out_scale_tensor = false;  ///< actnorm's c as a 0-d f32 tensor, not a float
  std::vector<E0m3Layer> layers;      ///< sorted by name
};

/// The aux fields copied from each record, in artifact order; absent ones are skipped.
inline constexpr const char* kE0m3AuxFields[] = {"duquant_rotation_blocks",
                                                 "duquant_rotation_perm",
                                                 "duquant_rotation_out_blocks",
                                                 "act_scale_table",
                                                 "weight_bits",
                                                 "a_bits",
                                                 "in_features",
                                                 "out_features",
                                                 "rank"};

/// Writes the .pt artifact one storage at a time: produce(i, sink) writes layer i's packed bytes
/// to sink and leaves its sfb and fp16 in `ws` (ws.layer == i) when the file reaches them, in
/// layer order; the aux tensors are read from the pack as they are written.
Status write_e0m3_torch(const E0m3Artifact& a, const E0m3Workspace& ws, const std::string& path,
                        const std::function<Status(std::size_t, ByteSink&)>& produce);
/// Writes the safetensors artifact on the one executor (exec/file_jobs.h): each layer's rows in
/// bands of 128-row tiles, read, folded by `factors[i]` (empty: no fold) and quantized on every
/// worker, land at their planned offsets; `on_progress` gets the fp16 bytes done so far.
Status write_e0m3_safetensors(const E0m3Artifact& a, std::span<const std::vector<float>> factors,
                              const std::string& path,
                              const std::function<void(std::uint64_t)>& on_progress);

/// The per-column factors layer l's fold multiplies its weight by (empty for fold none).
Result<std::vector<float>> e0m3_fold_factors(const TorchFile& pack, E0m3Fold fold,
                                             const E0m3Layer& l);
/// W[:, c] = fp16(W[:, c] * r[c]) over `n` rows of `k`.
void e0m3_fold_rows(std::span<std::uint16_t> w, std::span<const float> r, std::uint64_t n,
                    std::uint64_t k);

}  // namespace qrepack
