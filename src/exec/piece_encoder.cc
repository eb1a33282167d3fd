// Row blocks of quantized pieces (exec/piece_encoder.h).
#include "exec/piece_encoder.h"

#include <array>

#include "kernels/kernels.h"
#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

std::uint64_t rows_of(const LogicalWeight& w) { return WeightReader::rows_of(w); }
std::uint64_t cols_of(const LogicalWeight& w) { return WeightReader::cols_of(w); }

// Whether int4 rows of `w` can be encoded straight from its stored codes (FP8 or BF16, rows
// contiguous).
bool fused_source(const LogicalWeight& w) {
  if (w.row_stride != 1) return false;
  if (w.encoding == SourceEncoding::kFp8Block || w.encoding == SourceEncoding::kFp8Tensor) {
    return true;
  }
  return w.encoding == SourceEncoding::kFloat && w.source_dtype == Dtype::kBF16;
}

// The GLM converters' int4 (scale max(amax / 7, 1e-8)), which the SIMD kernels compute.
bool engine_rule(const QuantRule& r, std::uint64_t cols) {
  return r.engine_int4() && !r.planar64 && cols % 2 == 0;
}

// The GLM path's fused kernels: FP8 rows sharing block scales at once, BF16 rows one by one,
// each decoded as it is encoded. False (nothing to trust in the outputs) when the source is
// of another kind or a row holds a non-finite value: the caller then decodes the rows, which
// names the value.
bool encode_fused(WeightReader& reader, const LogicalWeight& w, std::uint64_t row0, std::uint64_t n,
                  std::uint64_t group, JobBuffers& b) {
  if (!reader.open(w).ok()) return false;
  const std::uint64_t cols = reader.cols(), raw_row = reader.raw_row_bytes();
  b.raw.resize(n * raw_row);
  if (!reader.read_raw_rows(row0, n, b.raw).ok()) return false;
  b.bytes_read += n * raw_row;
  const std::uint64_t ng = ceil_div(cols, group ? group : cols), pb = cols / 2;
  using Kind = WeightReader::RowCodes::Kind;
  for (std::uint64_t i = 0; i < n;) {
    const WeightReader::RowCodes c = reader.row_codes(row0 + i);
    const std::uint8_t* raw = b.raw.data() + i * raw_row;
    std::uint8_t* out = b.bytes.data() + i * pb;
    float* scales = b.scales.data() + i * ng;
    if (c.kind == Kind::kFp8) {
      const std::uint64_t rows = std::min(n - i, c.shared_rows);
      if (!kernels::fp8_to_int4_rows(raw, rows, cols, c.block_scales, c.block_cols, group, out,
                                     scales)) {
        return false;
      }
      i += rows;
    } else if (c.kind == Kind::kBf16) {
      if (!kernels::bf16_to_int4_row(reinterpret_cast<const std::uint16_t*>(raw), cols, group, out,
                                     scales)) {
        return false;
      }
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

// b.codes (rows x cols) packed into b.bytes under `r`.
void pack_rows(JobBuffers& b, std::uint64_t rows, std::uint64_t cols, const QuantRule& r) {
  if (r.packed() && r.byte_rows) {
    const std::uint64_t row_bytes = (cols + 1) / 2;
    for (std::uint64_t i = 0; i < rows; ++i) {
      if (r.planar64) {
        pack_codes_planar64(b.codes.data() + i * cols, cols, r, b.bytes.data() + i * row_bytes);
      } else {
        pack_codes(b.codes.data() + i * cols, cols, r, b.bytes.data() + i * row_bytes);
      }
    }
  } else {
    pack_codes(b.codes.data(), rows * cols, r, b.bytes.data());
  }
}

// Row `src` (of `cols` f32 in b.f32, or stored BF16 in b.raw when `bf16`) encoded as output
// row `dst` of the job: codes into b.codes (b.bytes for the engine rule), scales into b.scales.
bool encode_row(JobBuffers& b, const QuantRule& r, std::uint64_t cols, std::uint64_t src,
                std::uint64_t dst, bool bf16, std::uint64_t raw_row) {
  const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
  float* scales = b.scales.data() + dst * groups;
  if (bf16) {
    const auto* row = reinterpret_cast<const std::uint16_t*>(b.raw.data() + src * raw_row);
    return kernels::bf16_to_int4_row(row, cols, r.group, b.bytes.data() + dst * cols / 2, scales);
  }
  if (engine_rule(r, cols)) {
    kernels::int4_encode_row(b.f32.data() + src * cols, cols, r.group,
                             b.bytes.data() + dst * cols / 2, scales);
  } else {
    quantize_rows(b.f32.data() + src * cols, 1, cols, r, b.codes.data() + dst * cols, scales);
  }
  return true;
}

}  // namespace

Status read_weight_rows(WeightReader& reader, const LogicalWeight& w, std::uint64_t row0,
                        std::uint64_t n, JobBuffers& b) {
  QR_TRY(reader.open(w));
  const std::uint64_t cols = cols_of(w);
  b.f32.resize(n * cols);
  QR_TRY(reader.read_rows(row0, n, b.f32));
  b.bytes_read += n * WeightReader::stored_row_bytes(w, cols);
  return ok_status();
}

Status encode_piece_rows(WeightReader& reader, const LogicalWeight& w, const QuantRule& r,
                         std::uint64_t first, std::uint64_t count, JobBuffers& b) {
  const std::uint64_t cols = cols_of(w);
  b.scales.resize(count * ceil_div(cols, r.group ? r.group : cols));
  b.bytes.assign(code_bytes(count, cols, r), 0);
  const bool engine = engine_rule(r, cols);
  if (engine && fused_source(w) && encode_fused(reader, w, first, count, r.group, b)) {
    return ok_status();
  }
  QR_TRY(read_weight_rows(reader, w, first, count, b));
  if (engine) {
    for (std::uint64_t i = 0; i < count; ++i) encode_row(b, r, cols, i, i, false, 0);
    return ok_status();
  }
  b.codes.resize(count * cols);
  quantize_rows(b.f32.data(), count, cols, r, b.codes.data(), b.scales.data());
  pack_rows(b, count, cols, r);
  return ok_status();
}

std::uint32_t interleaved_pieces(const ContainerUnit& u, std::uint32_t p) {
  const LogicalWeight& w = *u.pieces[p].weight;
  const std::uint32_t n = w.row_stride;
  const QuantRule& r = u.pieces[p].rule;
  if (n < 2 || w.row0 != 0 || w.encoding != SourceEncoding::kFloat || p + n > u.pieces.size() ||
      (r.packed() && !r.byte_rows && cols_of(w) % 2 != 0)) {
    return 0;
  }
  for (std::uint32_t k = 1; k < n; ++k) {
    const LogicalWeight& o = *u.pieces[p + k].weight;
    if (o.data.entry != w.data.entry || o.expert != w.expert || o.row_stride != n || o.row0 != k ||
        o.encoding != w.encoding || rows_of(o) != rows_of(w) || cols_of(o) != cols_of(w) ||
        !(u.pieces[p + k].rule == r)) {
      return 0;
    }
  }
  return n;
}

InterleavedGroup interleaved_group(const LogicalWeight& lead, std::uint32_t n) {
  InterleavedGroup g{n, lead};
  g.whole.row_stride = 1;
  const std::array<std::uint64_t, 2> shape{rows_of(lead) * n, cols_of(lead)};
  g.whole.shape = WeightShape(shape);
  return g;
}

Status encode_interleaved_rows(WeightReader& reader, const InterleavedGroup& g, const QuantRule& r,
                               std::uint64_t first, std::uint64_t count, JobBuffers& b,
                               const std::function<Status(std::uint32_t)>& emit) {
  const std::uint64_t cols = cols_of(g.whole), n = g.count;
  const bool engine = engine_rule(r, cols);
  const bool bf16 = engine && g.whole.source_dtype == Dtype::kBF16;
  std::uint64_t raw_row = 0;
  if (bf16) {
    QR_TRY(reader.open(g.whole));
    raw_row = reader.raw_row_bytes();
    b.raw.resize(count * n * raw_row);
    QR_TRY(reader.read_raw_rows(first * n, count * n, b.raw));
    b.bytes_read += count * n * raw_row;
  } else {
    QR_TRY(read_weight_rows(reader, g.whole, first * n, count * n, b));
  }
  for (std::uint32_t k = 0; k < n; ++k) {
    b.scales.resize(count * ceil_div(cols, r.group ? r.group : cols));
    b.bytes.assign(code_bytes(count, cols, r), 0);
    if (!engine) b.codes.resize(count * cols);
    for (std::uint64_t i = 0; i < count; ++i) {
      if (!encode_row(b, r, cols, i * n + k, i, bf16, raw_row)) {
        return Error(ErrorKind::kNonFiniteWeight, "a row the kernel refuses");
      }
    }
    if (!engine) pack_rows(b, count, cols, r);
    QR_TRY(emit(k));
  }
  return ok_status();
}

}  // namespace qrepack
