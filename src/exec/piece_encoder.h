// Encoding a container unit's quantized pieces, row block by row block, on one worker: the
// GLM converters' int4 straight from FP8 or BF16 rows (the SIMD kernels), other rules through
// decoded f32 rows and quantize_rows, and pieces that are the interleaved row sets of one
// matrix (Inkling's gate / up rows g0, u0, g1, u1, ...) from one read of those rows. The
// bytes come out as the unit stores them; where they go is the job source's business.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/targets/container.h"

namespace qrepack {

/// A worker's buffers, reused from job to job; `bytes_read` counts the source bytes the current
/// job read.
struct JobBuffers {
  std::vector<float> f32;
  std::vector<std::int8_t> codes;
  std::vector<std::uint8_t> bytes;  ///< encoded codes (or a copy's / raw cast's input)
  std::vector<float> scales;
  std::vector<std::uint8_t> raw;  ///< stored rows for the fused kernels
  std::uint64_t bytes_read = 0;
};

/// Rows [row0, row0 + n) of `w` decoded to f32 into b.f32.
Status read_weight_rows(WeightReader& reader, const LogicalWeight& w, std::uint64_t row0,
                        std::uint64_t n, JobBuffers& b);

/// Rows [first, first + count) of `w` under `r`: their codes into b.bytes, their scales into
/// b.scales. Errors (a value not finite, a read) name the weight.
Status encode_piece_rows(WeightReader& reader, const LogicalWeight& w, const QuantRule& r,
                         std::uint64_t first, std::uint64_t count, JobBuffers& b);

/// Pieces whose rows interleave in one float matrix, read once as `whole`.
struct InterleavedGroup {
  std::uint32_t count = 0;
  LogicalWeight whole;
};

/// n when pieces p, p + 1, ..., p + n - 1 of `u` are the n interleaved row sets of one float
/// matrix (rows k, k + n, ... of it), alike in shape and rule, each row packing to whole bytes;
/// else 0.
std::uint32_t interleaved_pieces(const ContainerUnit& u, std::uint32_t p);

/// The group of `n` interleaved pieces led by `lead`: its matrix as plain rows.
InterleavedGroup interleaved_group(const LogicalWeight& lead, std::uint32_t n);

/// Rows [first, first + count) of every piece of `g` under `r`, from one read of the matrix rows
/// [first * n, (first + count) * n) (piece k's row i is row i * n + k there): after piece k's
/// codes and scales are in b.bytes / b.scales, `emit(k)` takes them. An error (a value the
/// kernels refuse, a read) carries no tensor context: encode the pieces one by one to name it.
Status encode_interleaved_rows(WeightReader& reader, const InterleavedGroup& g, const QuantRule& r,
                               std::uint64_t first, std::uint64_t count, JobBuffers& b,
                               const std::function<Status(std::uint32_t)>& emit);

}  // namespace qrepack
