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

#include "exec/piece_encoder.h"
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
  JobBuffers b;
  std::vector<std::uint16_t> halves;
  FileWriter* out = nullptr;  ///< the current job's
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
    s.b.bytes_read = 0;
    s.out = &out;
    QR_TRY(run_job(job, s));
    return s.b.bytes_read;
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
          if (const std::uint32_t n = interleaved_pieces(unit, p)) {
            interleaved_of_[u][p] = static_cast<std::uint32_t>(interleaved_.size());
            interleaved_.push_back(interleaved_group(*piece.weight, n));
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

  Status run_job(const FileJob& j, WorkerState& s) {
    const ContainerUnit& u = plan_.units[j.unit];
    switch (u.kind) {
      case UnitKind::kCopy: {
        std::vector<std::uint8_t>& bytes = s.b.bytes;
        bytes.resize(j.count);
        QR_TRY(ck_.read(u.raw, j.first, bytes));
        s.b.bytes_read += j.count;
        // Each job owns its slot: written once, read after every job has ended.
        std::vector<std::uint64_t>& d = digests_.of_unit[j.unit];
        if (!d.empty()) d[j.first / job_bytes_] = XXH3_64bits(bytes.data(), bytes.size());
        return write_at(u.file, u.data, j.first, bytes, s);
      }
      case UnitKind::kCast:
        return cast_job(j, u, s);
      case UnitKind::kQuant:
        return quant_job(j, u, s);
    }
    return ok_status();
  }

  // Elements [row0, row0 + rows) of a raw BF16 / F16 / F32 tensor, decoded to f32.
  Status read_raw_floats(JobBuffers& b, const TensorRef& t, std::uint64_t first, std::uint64_t n) {
    const std::uint64_t width = dtype_info(t.entry->dtype).bits / 8;
    b.bytes.resize(n * width);
    QR_TRY(ck_.read(t, first * width, b.bytes));
    b.bytes_read += n * width;
    b.f32.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint8_t* p = b.bytes.data() + i * width;
      switch (t.entry->dtype) {
        case Dtype::kF32:
          std::memcpy(&b.f32[i], p, 4);
          break;
        case Dtype::kBF16: {
          const std::uint32_t bits = static_cast<std::uint32_t>(p[0] | (p[1] << 8)) << 16;
          std::memcpy(&b.f32[i], &bits, 4);
          break;
        }
        case Dtype::kF16:
          b.f32[i] = f16_decode(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
          break;
        default:
          return Error(ErrorKind::kInternal, "raw cast of a non-float tensor")
              .in_tensor(t.entry->name);
      }
      if (!std::isfinite(b.f32[i])) {
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
    const std::vector<float>& f32 = s.b.f32;
    if (u.weight) {
      QR_TRY(read_weight_rows(reader(s), *u.weight, j.first, j.count, s.b));
      cols = cols_of(*u.weight);
    } else {
      QR_TRY(read_raw_floats(s.b, u.raw, j.first, j.count));
    }
    const std::uint64_t width = dtype_info(u.dtype).bits / 8;
    std::span<const std::uint8_t> out;
    if (u.dtype == Dtype::kF32) {
      out = std::span(reinterpret_cast<const std::uint8_t*>(f32.data()), f32.size() * 4);
    } else {
      s.halves.resize(f32.size());
      if (u.dtype == Dtype::kF16) {
        kernels::f32_to_f16(f32.data(), f32.size(), s.halves.data());
      } else {
        kernels::f32_to_bf16(f32.data(), f32.size(), s.halves.data());
      }
      out = std::span(reinterpret_cast<const std::uint8_t*>(s.halves.data()), s.halves.size() * 2);
    }
    return write_at(u.file, u.data, j.first * cols * width, out, s);
  }

  Status quant_job(const FileJob& j, const ContainerUnit& u, WorkerState& s) {
    const std::uint32_t g = interleaved_of_[j.unit][j.part];
    if (g == kNoGroup) return quant_piece(j, u, s);
    const auto emit = [&](std::uint32_t k) {
      return write_piece_rows(j.unit, j.part + k, j.first, j.count, s);
    };
    const QuantRule& r = u.pieces[j.part].rule;
    if (encode_interleaved_rows(reader(s), interleaved_[g], r, j.first, j.count, s.b, emit).ok()) {
      return ok_status();
    }
    // A value the kernels refuse, or a read that failed: piece by piece, which names it as a
    // plan without interleaved jobs would.
    for (std::uint32_t k = 0; k < interleaved_[g].count; ++k) {
      FileJob one = j;
      one.part = j.part + k;
      QR_TRY(quant_piece(one, u, s));
    }
    return ok_status();
  }

  // s.b.bytes and s.b.scales, rows [first, first + rows) of piece `part`, at their offsets.
  Status write_piece_rows(std::uint32_t unit, std::uint32_t part, std::uint64_t first,
                          std::uint64_t rows, WorkerState& s) {
    const ContainerUnit& u = plan_.units[unit];
    const UnitPiece& p = u.pieces[part];
    const std::uint64_t cols = cols_of(*p.weight);
    const QuantRule& r = p.rule;
    const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
    const PieceOffsets& at = piece_offsets_[unit][part];
    QR_TRY(write_at(u.file, u.data, at.code_byte + code_bytes(first, cols, r),
                    std::span<const std::uint8_t>(s.b.bytes.data(), code_bytes(rows, cols, r)), s));
    return write_at(
        u.file, u.scales, 4 * (at.scale + first * groups),
        std::span(reinterpret_cast<const std::uint8_t*>(s.b.scales.data()), rows * groups * 4), s);
  }

  Status quant_piece(const FileJob& j, const ContainerUnit& u, WorkerState& s) {
    const UnitPiece& p = u.pieces[j.part];
    QR_TRY(encode_piece_rows(reader(s), *p.weight, p.rule, j.first, j.count, s.b));
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
  std::deque<InterleavedGroup> interleaved_;  ///< stable addresses: readers keep pointers
  CopyDigests digests_;
};

}  // namespace

std::unique_ptr<ContainerJobSource> container_job_source(const Checkpoint& ck,
                                                         const ContainerPlan& plan,
                                                         std::uint64_t job_bytes) {
  return std::make_unique<UnitJobs>(ck, plan, job_bytes);
}

}  // namespace qrepack
