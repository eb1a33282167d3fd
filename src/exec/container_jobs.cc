// The container targets' job source (exec/container_jobs.h): a unit's pieces in row blocks, a
// copy in byte ranges, a cast in row or element blocks, each encoded on a worker and written at
// its tensor's offset.
#include "exec/container_jobs.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>

#include "kernels/kernels.h"
#include "qrepack/core/checked.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/formats/float16.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

// Where each piece of a quantized unit starts in its data and scales tensors.
struct PieceOffsets {
  std::uint64_t code_byte = 0;
  std::uint64_t scale = 0;  ///< in scales
};

struct WorkerState {
  std::optional<WeightReader> reader;
  std::vector<float> f32;
  std::vector<std::int8_t> codes;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;
  std::vector<std::uint16_t> halves;
  std::vector<std::uint8_t> raw;  ///< stored rows for the fused kernels
  std::uint64_t bytes_read = 0;   ///< by the current job
  FileWriter* out = nullptr;      ///< the current job's
};

// Pieces that are the interleaved row sets of one matrix: read once as `whole` by the jobs of
// the first of them, which write all `count`.
struct Interleaved {
  std::uint32_t count = 0;
  LogicalWeight whole;
};
constexpr std::uint32_t kNoGroup = ~std::uint32_t{0};

std::uint64_t rows_of(const LogicalWeight& w) { return WeightReader::rows_of(w); }
std::uint64_t cols_of(const LogicalWeight& w) { return WeightReader::cols_of(w); }

class UnitJobs final : public ContainerJobSource {
 public:
  UnitJobs(const Checkpoint& ck, const ContainerPlan& plan, std::uint64_t job_bytes)
      : ck_(ck),
        plan_(plan),
        job_bytes_(job_bytes),
        state_(std::max<std::size_t>(1, thread_count())) {
    offsets_.resize(plan.files.size());
    for (std::size_t i = 0; i < plan.files.size(); ++i) {
      std::uint64_t off = 0;
      for (const TensorSpec& t : plan.files[i].tensors) {
        offsets_[i].push_back(off);
        off += data_bytes(t.view());
      }
    }
  }

  const CopyDigests& copy_digests() const override { return digests_; }

  // The jobs of every file to write, in file order (units in plan order within a file).
  Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) override {
    piece_offsets_.assign(plan_.units.size(), {});
    interleaved_of_.assign(plan_.units.size(), {});
    interleaved_.clear();
    digests_.chunk = job_bytes_;
    digests_.of_unit.assign(plan_.units.size(), {});
    std::vector<std::vector<std::uint32_t>> units_of(plan_.files.size());
    for (std::uint32_t u = 0; u < plan_.units.size(); ++u)
      units_of[plan_.units[u].file].push_back(u);
    for (std::uint32_t f = 0; f < plan_.files.size(); ++f) {
      if (!write[f]) continue;
      for (const std::uint32_t u : units_of[f]) QR_TRY(unit_jobs(u, out));
    }
    return ok_status();
  }

  Result<std::uint64_t> run(const FileJob& job, std::size_t worker, FileWriter& out) override {
    WorkerState& s = state_[worker];
    s.bytes_read = 0;
    s.out = &out;
    QR_TRY(run_job(job, s));
    return s.bytes_read;
  }

 private:
  // Rows per job: about job_bytes of f32, and an even count when a row holds an odd number of
  // codes packed as one flat run (so every job starts on a whole byte).
  std::uint64_t rows_per_job(std::uint64_t cols, bool even) const {
    std::uint64_t r = std::max<std::uint64_t>(1, job_bytes_ / std::max<std::uint64_t>(1, 4 * cols));
    if (even && r % 2) ++r;
    return r;
  }

  void push(std::vector<FileJob>& out, std::uint32_t u, std::uint32_t part, std::uint64_t first,
            std::uint64_t count) {
    FileJob j;
    j.file = plan_.units[u].file;
    j.unit = u;
    j.part = part;
    j.first = first;
    j.count = count;
    out.push_back(j);
  }

  Status unit_jobs(std::uint32_t u, std::vector<FileJob>& out) {
    const ContainerUnit& unit = plan_.units[u];
    switch (unit.kind) {
      case UnitKind::kCopy: {
        const std::uint64_t n = unit.raw.entry->byte_size();
        if (plan_.verify_copies) digests_.of_unit[u].assign(ceil_div(n, job_bytes_), 0);
        for (std::uint64_t b = 0; b < n; b += job_bytes_)
          push(out, u, 0, b, std::min(job_bytes_, n - b));
        return ok_status();
      }
      case UnitKind::kCast: {
        if (!unit.weight) {  // a raw float tensor: element ranges of about job_bytes of f32
          const std::uint64_t n = unit.raw.entry->numel();
          const std::uint64_t step = std::max<std::uint64_t>(1, job_bytes_ / 4);
          for (std::uint64_t b = 0; b < n; b += step) push(out, u, 0, b, std::min(step, n - b));
          return ok_status();
        }
        const std::uint64_t rows = rows_of(*unit.weight),
                            step = rows_per_job(cols_of(*unit.weight), false);
        for (std::uint64_t r = 0; r < rows; r += step) push(out, u, 0, r, std::min(step, rows - r));
        return ok_status();
      }
      case UnitKind::kQuant: {
        PieceOffsets at;
        std::uint32_t covered = 0;  // pieces below this are written by an interleaved leader
        interleaved_of_[u].assign(unit.pieces.size(), kNoGroup);
        for (std::uint32_t p = 0; p < unit.pieces.size(); ++p) {
          const UnitPiece& piece = unit.pieces[p];
          piece_offsets_[u].push_back(at);
          const std::uint64_t rows = rows_of(*piece.weight), cols = cols_of(*piece.weight);
          const QuantRule& r = piece.rule;
          if (r.packed() && !r.byte_rows && (rows * cols) % 2 != 0) {
            return Error(ErrorKind::kInternal,
                         fmt::format("tensor '{}': an odd number of codes in a packed run",
                                     piece.weight->name));
          }
          at.code_byte += code_bytes(rows, cols, r);
          at.scale += rows * ceil_div(cols, r.group ? r.group : cols);
          if (p < covered) continue;
          std::uint64_t width = cols;
          if (const std::uint32_t n = interleaved_at(unit, p)) {
            interleaved_of_[u][p] = add_interleaved(*piece.weight, n);
            covered = p + n;
            width = cols * n;  // a job reads its rows of all n pieces
          }
          const std::uint64_t step = rows_per_job(width, r.packed() && !r.byte_rows && cols % 2);
          for (std::uint64_t row = 0; row < rows; row += step) {
            push(out, u, p, row, std::min(step, rows - row));
          }
        }
        return ok_status();
      }
    }
    return ok_status();
  }

  Status write_at(std::uint32_t file, std::uint32_t tensor, std::uint64_t offset,
                  std::span<const std::uint8_t> bytes, WorkerState& s) {
    return s.out->write(file, offsets_[file][tensor] + offset, bytes);
  }

  WeightReader& reader(WorkerState& s) {
    if (!s.reader) {
      s.reader.emplace(ck_, plan_.recognized->block_rows, plan_.recognized->block_cols);
    }
    return *s.reader;
  }

  Status read_rows(WorkerState& s, const LogicalWeight& w, std::uint64_t row0, std::uint64_t n) {
    WeightReader& r = reader(s);
    QR_TRY(r.open(w));
    const std::uint64_t cols = cols_of(w);
    s.f32.resize(n * cols);
    QR_TRY(r.read_rows(row0, n, s.f32));
    s.bytes_read += n * WeightReader::stored_row_bytes(w, cols);
    return ok_status();
  }

  Status run_job(const FileJob& j, WorkerState& s) {
    const ContainerUnit& u = plan_.units[j.unit];
    switch (u.kind) {
      case UnitKind::kCopy: {
        s.bytes.resize(j.count);
        QR_TRY(ck_.read(u.raw, j.first, s.bytes));
        s.bytes_read += j.count;
        // Each job owns its slot: written once, read after every job has ended.
        std::vector<std::uint64_t>& d = digests_.of_unit[j.unit];
        if (!d.empty()) d[j.first / job_bytes_] = XXH3_64bits(s.bytes.data(), s.bytes.size());
        return write_at(u.file, u.data, j.first, s.bytes, s);
      }
      case UnitKind::kCast:
        return cast_job(j, u, s);
      case UnitKind::kQuant:
        return quant_job(j, u, s);
    }
    return ok_status();
  }

  // Elements [row0, row0 + rows) of a raw BF16 / F16 / F32 tensor, decoded to f32.
  Status read_raw_floats(WorkerState& s, const TensorRef& t, std::uint64_t first, std::uint64_t n) {
    const std::uint64_t width = dtype_info(t.entry->dtype).bits / 8;
    s.bytes.resize(n * width);
    QR_TRY(ck_.read(t, first * width, s.bytes));
    s.bytes_read += n * width;
    s.f32.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint8_t* p = s.bytes.data() + i * width;
      switch (t.entry->dtype) {
        case Dtype::kF32:
          std::memcpy(&s.f32[i], p, 4);
          break;
        case Dtype::kBF16: {
          const std::uint32_t bits = static_cast<std::uint32_t>(p[0] | (p[1] << 8)) << 16;
          std::memcpy(&s.f32[i], &bits, 4);
          break;
        }
        case Dtype::kF16:
          s.f32[i] = f16_decode(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
          break;
        default:
          return Error(ErrorKind::kInternal, "raw cast of a non-float tensor")
              .in_tensor(t.entry->name);
      }
      if (!std::isfinite(s.f32[i])) {
        return Error(ErrorKind::kNonFiniteWeight,
                     fmt::format("element {} is not finite", first + i))
            .in_tensor(t.entry->name)
            .with_rule("tensor.finite");
      }
    }
    return ok_status();
  }

  Status cast_job(const FileJob& j, const ContainerUnit& u, WorkerState& s) {
    std::uint64_t cols = 1;
    if (u.weight) {
      QR_TRY(read_rows(s, *u.weight, j.first, j.count));
      cols = cols_of(*u.weight);
    } else {
      QR_TRY(read_raw_floats(s, u.raw, j.first, j.count));
    }
    const std::uint64_t width = dtype_info(u.dtype).bits / 8;
    std::span<const std::uint8_t> out;
    if (u.dtype == Dtype::kF32) {
      out = std::span(reinterpret_cast<const std::uint8_t*>(s.f32.data()), s.f32.size() * 4);
    } else {
      s.halves.resize(s.f32.size());
      if (u.dtype == Dtype::kF16) {
        kernels::f32_to_f16(s.f32.data(), s.f32.size(), s.halves.data());
      } else {
        kernels::f32_to_bf16(s.f32.data(), s.f32.size(), s.halves.data());
      }
      out = std::span(reinterpret_cast<const std::uint8_t*>(s.halves.data()), s.halves.size() * 2);
    }
    return write_at(u.file, u.data, j.first * cols * width, out, s);
  }

  // Whether int4 rows of `w` can be encoded straight from its stored codes (FP8 or BF16, rows
  // contiguous).
  static bool fused_source(const LogicalWeight& w) {
    if (w.row_stride != 1) return false;
    if (w.encoding == SourceEncoding::kFp8Block || w.encoding == SourceEncoding::kFp8Tensor) {
      return true;
    }
    return w.encoding == SourceEncoding::kFloat && w.source_dtype == Dtype::kBF16;
  }

  // The GLM path's fused kernels: FP8 rows sharing block scales at once, BF16 rows one by one,
  // each decoded as it is encoded. False (nothing to trust in the outputs) when the source is
  // of another kind or a row holds a non-finite value: the caller then decodes the rows, which
  // names the value.
  bool encode_fused(WorkerState& s, const LogicalWeight& w, std::uint64_t row0, std::uint64_t n,
                    std::uint64_t group) {
    WeightReader& reader = this->reader(s);
    if (!reader.open(w).ok()) return false;
    const std::uint64_t cols = reader.cols(), raw_row = reader.raw_row_bytes();
    s.raw.resize(n * raw_row);
    if (!reader.read_raw_rows(row0, n, s.raw).ok()) return false;
    s.bytes_read += n * raw_row;
    const std::uint64_t ng = ceil_div(cols, group ? group : cols), pb = cols / 2;
    using Kind = WeightReader::RowCodes::Kind;
    for (std::uint64_t i = 0; i < n;) {
      const WeightReader::RowCodes c = reader.row_codes(row0 + i);
      const std::uint8_t* raw = s.raw.data() + i * raw_row;
      std::uint8_t* out = s.bytes.data() + i * pb;
      float* scales = s.scales.data() + i * ng;
      if (c.kind == Kind::kFp8) {
        const std::uint64_t rows = std::min(n - i, c.shared_rows);
        if (!kernels::fp8_to_int4_rows(raw, rows, cols, c.block_scales, c.block_cols, group, out,
                                       scales)) {
          return false;
        }
        i += rows;
      } else if (c.kind == Kind::kBf16) {
        if (!kernels::bf16_to_int4_row(reinterpret_cast<const std::uint16_t*>(raw), cols, group,
                                       out, scales)) {
          return false;
        }
        ++i;
      } else {
        return false;
      }
    }
    return true;
  }

  static void pack_job_codes(WorkerState& s, std::uint64_t rows, std::uint64_t cols,
                             const QuantRule& r) {
    if (r.packed() && r.byte_rows) {
      const std::uint64_t row_bytes = (cols + 1) / 2;
      for (std::uint64_t i = 0; i < rows; ++i) {
        if (r.planar64) {
          pack_codes_planar64(s.codes.data() + i * cols, cols, r, s.bytes.data() + i * row_bytes);
        } else {
          pack_codes(s.codes.data() + i * cols, cols, r, s.bytes.data() + i * row_bytes);
        }
      }
    } else {
      pack_codes(s.codes.data(), rows * cols, r, s.bytes.data());
    }
  }

  // Pieces `p`, p + 1, ..., p + n - 1 of `u` when they are the n interleaved row sets of one
  // float matrix (Inkling's gate / up rows g0, u0, g1, u1, ...: rows k, k + n, ... of it),
  // alike in shape and rule, each row packing to whole bytes: n; else 0.
  static std::uint32_t interleaved_at(const ContainerUnit& u, std::uint32_t p) {
    const LogicalWeight& w = *u.pieces[p].weight;
    const std::uint32_t n = w.row_stride;
    const QuantRule& r = u.pieces[p].rule;
    if (n < 2 || w.row0 != 0 || w.encoding != SourceEncoding::kFloat || p + n > u.pieces.size() ||
        (r.packed() && !r.byte_rows && cols_of(w) % 2 != 0)) {
      return 0;
    }
    for (std::uint32_t k = 1; k < n; ++k) {
      const LogicalWeight& o = *u.pieces[p + k].weight;
      if (o.data.entry != w.data.entry || o.expert != w.expert || o.row_stride != n ||
          o.row0 != k || o.encoding != w.encoding || rows_of(o) != rows_of(w) ||
          cols_of(o) != cols_of(w) || !(u.pieces[p + k].rule == r)) {
        return 0;
      }
    }
    return n;
  }

  // The whole matrix behind `n` interleaved pieces led by `w`, read as plain rows.
  std::uint32_t add_interleaved(const LogicalWeight& w, std::uint32_t n) {
    Interleaved g{n, w};
    g.whole.row_stride = 1;
    const std::array<std::uint64_t, 2> shape{rows_of(w) * n, cols_of(w)};
    g.whole.shape = WeightShape(shape);
    interleaved_.push_back(std::move(g));
    return static_cast<std::uint32_t>(interleaved_.size() - 1);
  }

  Status quant_job(const FileJob& j, const ContainerUnit& u, WorkerState& s) {
    const std::uint32_t g = interleaved_of_[j.unit][j.part];
    if (g == kNoGroup) return quant_piece(j, u, s);
    if (interleaved_job(j, u, interleaved_[g], s).ok()) return ok_status();
    // A value the kernels refuse, or a read that failed: piece by piece, which names it as a
    // plan without interleaved jobs would.
    for (std::uint32_t k = 0; k < interleaved_[g].count; ++k) {
      FileJob one = j;
      one.part = j.part + k;
      QR_TRY(quant_piece(one, u, s));
    }
    return ok_status();
  }

  // Rows [first, first + count) of every piece of an interleaved group, from one read of the
  // matrix rows [first * n, (first + count) * n): piece k's row i is row i * n + k there.
  Status interleaved_job(const FileJob& j, const ContainerUnit& u, const Interleaved& g,
                         WorkerState& s) {
    const QuantRule& r = u.pieces[j.part].rule;
    const std::uint64_t cols = cols_of(g.whole), n = g.count, rows = j.count;
    const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
    const bool engine = r.engine_int4() && !r.planar64 && cols % 2 == 0;
    const bool bf16 = engine && g.whole.source_dtype == Dtype::kBF16;
    std::uint64_t raw_row = 0;
    if (bf16) {
      WeightReader& reader = this->reader(s);
      QR_TRY(reader.open(g.whole));
      raw_row = reader.raw_row_bytes();
      s.raw.resize(rows * n * raw_row);
      QR_TRY(reader.read_raw_rows(j.first * n, rows * n, s.raw));
      s.bytes_read += rows * n * raw_row;
    } else {
      QR_TRY(read_rows(s, g.whole, j.first * n, rows * n));
    }
    for (std::uint32_t k = 0; k < n; ++k) {
      s.scales.resize(rows * groups);
      s.bytes.assign(code_bytes(rows, cols, r), 0);
      if (!engine) s.codes.resize(rows * cols);
      for (std::uint64_t i = 0; i < rows; ++i) {
        const std::uint64_t at = i * n + k;
        float* scales = s.scales.data() + i * groups;
        if (bf16) {
          const auto* row = reinterpret_cast<const std::uint16_t*>(s.raw.data() + at * raw_row);
          if (!kernels::bf16_to_int4_row(row, cols, r.group, s.bytes.data() + i * cols / 2,
                                         scales)) {
            return Error(ErrorKind::kNonFiniteWeight, "a row the kernel refuses");
          }
        } else if (engine) {
          kernels::int4_encode_row(s.f32.data() + at * cols, cols, r.group,
                                   s.bytes.data() + i * cols / 2, scales);
        } else {
          quantize_rows(s.f32.data() + at * cols, 1, cols, r, s.codes.data() + i * cols, scales);
        }
      }
      if (!engine) pack_job_codes(s, rows, cols, r);
      QR_TRY(write_piece_rows(j.unit, j.part + k, j.first, rows, s));
    }
    return ok_status();
  }

  // s.bytes and s.scales, rows [first, first + rows) of piece `part`, at their offsets.
  Status write_piece_rows(std::uint32_t unit, std::uint32_t part, std::uint64_t first,
                          std::uint64_t rows, WorkerState& s) {
    const ContainerUnit& u = plan_.units[unit];
    const UnitPiece& p = u.pieces[part];
    const std::uint64_t cols = cols_of(*p.weight);
    const QuantRule& r = p.rule;
    const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
    const PieceOffsets& at = piece_offsets_[unit][part];
    QR_TRY(write_at(u.file, u.data, at.code_byte + code_bytes(first, cols, r),
                    std::span<const std::uint8_t>(s.bytes.data(), code_bytes(rows, cols, r)), s));
    return write_at(
        u.file, u.scales, 4 * (at.scale + first * groups),
        std::span(reinterpret_cast<const std::uint8_t*>(s.scales.data()), rows * groups * 4), s);
  }

  Status quant_piece(const FileJob& j, const ContainerUnit& u, WorkerState& s) {
    const UnitPiece& p = u.pieces[j.part];
    const LogicalWeight& w = *p.weight;
    const std::uint64_t cols = cols_of(w);
    const QuantRule& r = p.rule;
    const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
    s.scales.resize(j.count * groups);
    const std::uint64_t nbytes = code_bytes(j.count, cols, r);
    s.bytes.assign(nbytes, 0);
    // The GLM converters' int4 (scale max(amax / 7, 1e-8)): the SIMD kernels, the same bytes.
    const bool engine = r.engine_int4() && !r.planar64 && cols % 2 == 0;
    if (!(engine && fused_source(w) && encode_fused(s, w, j.first, j.count, r.group))) {
      QR_TRY(read_rows(s, w, j.first, j.count));
      if (engine) {
        for (std::uint64_t i = 0; i < j.count; ++i) {
          kernels::int4_encode_row(s.f32.data() + i * cols, cols, r.group,
                                   s.bytes.data() + i * cols / 2, s.scales.data() + i * groups);
        }
      } else {
        s.codes.resize(j.count * cols);
        quantize_rows(s.f32.data(), j.count, cols, r, s.codes.data(), s.scales.data());
        pack_job_codes(s, j.count, cols, r);
      }
    }
    return write_piece_rows(j.unit, j.part, j.first, j.count, s);
  }

  const Checkpoint& ck_;
  const ContainerPlan& plan_;
  std::uint64_t job_bytes_;
  std::vector<WorkerState> state_;
  std::vector<std::vector<std::uint64_t>> offsets_;  ///< per file, per tensor, from the data start
  std::vector<std::vector<PieceOffsets>> piece_offsets_;
  /// Per unit, per piece: the interleaved group it leads (an index into interleaved_), else
  /// kNoGroup.
  std::vector<std::vector<std::uint32_t>> interleaved_of_;
  std::deque<Interleaved> interleaved_;  ///< stable addresses: readers keep pointers
  CopyDigests digests_;
};

}  // namespace

std::unique_ptr<ContainerJobSource> container_job_source(const Checkpoint& ck,
                                                         const ContainerPlan& plan,
                                                         std::uint64_t job_bytes) {
  return std::make_unique<UnitJobs>(ck, plan, job_bytes);
}

}  // namespace qrepack
