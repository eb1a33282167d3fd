// write_container: executes a ContainerPlan. Every output byte's position is known from the
// plan (file, tensor offset, row), so jobs (row blocks of a unit, byte ranges of a copy) are
// taken from one counter by every worker and written with pwrite: no ordering, no buffering
// beyond one job per worker, and bytes that do not depend on the thread count.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "core/sha256.h"
#include "kernels/kernels.h"
#include "qrepack/core/checked.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/formats/float16.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/targets/container.h"
#include "targets/container_io.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// One unit of work: rows [row0, row0 + rows) of one piece (or of a cast weight), or bytes
// [row0, row0 + rows) of a copied tensor.
struct Job {
  std::uint32_t unit;
  std::uint32_t piece;
  std::uint64_t row0;
  std::uint64_t rows;
};

// Where each piece of a quantized unit starts in its data and scales tensors.
struct PieceOffsets {
  std::uint64_t code_byte = 0;
  std::uint64_t scale = 0;  ///< in scales
};

struct FileState {
  int fd = -1;
  std::uint64_t data_start = 0;
  std::vector<std::uint64_t> offsets;  ///< per tensor, from the data start
};

struct WorkerState {
  std::optional<WeightReader> reader;
  std::vector<float> f32;
  std::vector<std::int8_t> codes;
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;
  std::vector<std::uint16_t> halves;
  std::vector<std::uint8_t> raw;  ///< stored rows for the fused kernels
};

std::uint64_t rows_of(const LogicalWeight& w) { return WeightReader::rows_of(w); }
std::uint64_t cols_of(const LogicalWeight& w) { return WeightReader::cols_of(w); }

class ContainerWriter {
 public:
  ContainerWriter(const Checkpoint& ck, const ContainerPlan& plan, const ContainerOptions& o,
                  std::string dir)
      : ck_(ck), plan_(plan), o_(o), dir_(std::move(dir)) {}

  ~ContainerWriter() {
    for (FileState& f : files_) {
      if (f.fd >= 0) ::close(f.fd);
    }
  }

  Status run(ContainerReport& rep) {
    QR_TRY(open_files(rep));
    QR_TRY(make_jobs());
    QR_TRY(execute());
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (::fsync(files_[i].fd) != 0 || ::close(files_[i].fd) != 0) {
        files_[i].fd = -1;
        return io_error(plan_.files[i].name, "fsync/close");
      }
      files_[i].fd = -1;
    }
    rep.bytes_read = bytes_read_.load();
    return ok_status();
  }

 private:
  Error io_error(const std::string& file, std::string_view what) const {
    return Error(ErrorKind::kIoWrite, fmt::format("{}: {}", what, std::strerror(errno)))
        .in_file((fs::path(dir_) / file).string());
  }

  Status open_files(ContainerReport& rep) {
    files_.resize(plan_.files.size());
    for (std::size_t i = 0; i < plan_.files.size(); ++i) {
      const ContainerFile& cf = plan_.files[i];
      QR_ASSIGN_OR_RETURN(layout,
                          cf.metadata_last.empty()
                              ? plan_safetensors(cf.tensors, cf.metadata)
                              : plan_safetensors_metadata_last(cf.tensors, cf.metadata_last));
      FileState& f = files_[i];
      const std::string path = (fs::path(dir_) / cf.name).string();
      f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (f.fd < 0) return io_error(cf.name, "cannot create");
      if (::ftruncate(f.fd, static_cast<off_t>(layout.file_size())) != 0) {
        return io_error(cf.name, "cannot size");
      }
      const auto header = safetensors_header_bytes(layout);
      QR_TRY(pwrite_all(f.fd, header, 0, path));
      f.data_start = layout.header_size;
      std::uint64_t off = 0;
      for (const TensorSpec& t : cf.tensors) {
        f.offsets.push_back(off);
        off += data_bytes(t.view());
      }
      rep.bytes_written += layout.file_size();
      rep.tensors += cf.tensors.size();
    }
    rep.files = plan_.files.size();
    return ok_status();
  }

  // Rows per job: about job_bytes of f32, and an even count when a row holds an odd number of
  // codes packed as one flat run (so every job starts on a whole byte).
  std::uint64_t rows_per_job(std::uint64_t cols, bool even) const {
    std::uint64_t r =
        std::max<std::uint64_t>(1, o_.job_bytes / std::max<std::uint64_t>(1, 4 * cols));
    if (even && r % 2) ++r;
    return r;
  }

  Status make_jobs() {
    piece_offsets_.resize(plan_.units.size());
    for (std::uint32_t u = 0; u < plan_.units.size(); ++u) {
      const ContainerUnit& unit = plan_.units[u];
      switch (unit.kind) {
        case UnitKind::kCopy: {
          const std::uint64_t n = unit.raw.entry->byte_size();
          for (std::uint64_t b = 0; b < n || b == 0; b += o_.job_bytes) {
            jobs_.push_back({u, 0, b, std::min(o_.job_bytes, n - b)});
            if (n == 0) break;
          }
          break;
        }
        case UnitKind::kCast: {
          if (!unit.weight) {  // a raw float tensor: element ranges of about job_bytes of f32
            const std::uint64_t n = unit.raw.entry->numel();
            const std::uint64_t step = std::max<std::uint64_t>(1, o_.job_bytes / 4);
            for (std::uint64_t b = 0; b < n; b += step)
              jobs_.push_back({u, 0, b, std::min(step, n - b)});
            break;
          }
          const std::uint64_t rows = rows_of(*unit.weight),
                              step = rows_per_job(cols_of(*unit.weight), false);
          for (std::uint64_t r = 0; r < rows; r += step) {
            jobs_.push_back({u, 0, r, std::min(step, rows - r)});
          }
          break;
        }
        case UnitKind::kQuant: {
          PieceOffsets at;
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
            const std::uint64_t step = rows_per_job(cols, r.packed() && !r.byte_rows && cols % 2);
            for (std::uint64_t row = 0; row < rows; row += step) {
              jobs_.push_back({u, p, row, std::min(step, rows - row)});
            }
            at.code_byte += code_bytes(rows, cols, r);
            at.scale += rows * ceil_div(cols, r.group ? r.group : cols);
          }
          break;
        }
      }
    }
    return ok_status();
  }

  Status execute() {
    const std::size_t workers = std::max<std::size_t>(1, thread_count());
    std::vector<WorkerState> state(workers);
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::optional<std::pair<std::size_t, Error>> first_error;
    parallel_for(workers, 1, [&](std::size_t b, std::size_t e, std::size_t worker) {
      for (std::size_t k = b; k < e; ++k) {
        for (;;) {
          const std::size_t j = next.fetch_add(1);
          if (j >= jobs_.size() || failed.load()) return;
          Status st = run_job(jobs_[j], state[worker]);
          if (!st.ok()) {
            std::lock_guard lock(mu);
            failed = true;
            if (!first_error || first_error->first > j) first_error.emplace(j, st.error());
            return;
          }
        }
      }
    });
    if (first_error) return std::move(first_error->second);
    return ok_status();
  }

  Status write_at(std::uint32_t file, std::uint32_t tensor, std::uint64_t offset,
                  std::span<const std::uint8_t> bytes) {
    const FileState& f = files_[file];
    return pwrite_all(f.fd, bytes, f.data_start + f.offsets[tensor] + offset,
                      (fs::path(dir_) / plan_.files[file].name).string());
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
    bytes_read_ += n * WeightReader::stored_row_bytes(w, cols);
    return ok_status();
  }

  Status run_job(const Job& j, WorkerState& s) {
    const ContainerUnit& u = plan_.units[j.unit];
    switch (u.kind) {
      case UnitKind::kCopy: {
        s.bytes.resize(j.rows);
        QR_TRY(ck_.read(u.raw, j.row0, s.bytes));
        bytes_read_ += j.rows;
        return write_at(u.file, u.data, j.row0, s.bytes);
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
    bytes_read_ += n * width;
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

  Status cast_job(const Job& j, const ContainerUnit& u, WorkerState& s) {
    std::uint64_t cols = 1;
    if (u.weight) {
      QR_TRY(read_rows(s, *u.weight, j.row0, j.rows));
      cols = cols_of(*u.weight);
    } else {
      QR_TRY(read_raw_floats(s, u.raw, j.row0, j.rows));
    }
    const std::uint64_t width = dtype_info(u.dtype).bits / 8;
    std::span<const std::uint8_t> out;
    if (u.dtype == Dtype::kF32) {
      out = std::span(reinterpret_cast<const std::uint8_t*>(s.f32.data()), s.f32.size() * 4);
    } else {
      s.halves.resize(s.f32.size());
      if (u.dtype == Dtype::kF16) {
        f16_encode_span(s.f32, s.halves);
      } else {
        bf16_encode_span(s.f32, s.halves);
      }
      out = std::span(reinterpret_cast<const std::uint8_t*>(s.halves.data()), s.halves.size() * 2);
    }
    return write_at(u.file, u.data, j.row0 * cols * width, out);
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
    bytes_read_ += n * raw_row;
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
        pack_codes(s.codes.data() + i * cols, cols, r, s.bytes.data() + i * row_bytes);
      }
    } else {
      pack_codes(s.codes.data(), rows * cols, r, s.bytes.data());
    }
  }

  Status quant_job(const Job& j, const ContainerUnit& u, WorkerState& s) {
    const UnitPiece& p = u.pieces[j.piece];
    const LogicalWeight& w = *p.weight;
    const std::uint64_t cols = cols_of(w);
    const QuantRule& r = p.rule;
    const std::uint64_t groups = ceil_div(cols, r.group ? r.group : cols);
    s.scales.resize(j.rows * groups);
    const std::uint64_t nbytes = code_bytes(j.rows, cols, r);
    s.bytes.assign(nbytes, 0);
    // The GLM converters' int4 (scale max(amax / 7, 1e-8)): the SIMD kernels, the same bytes.
    const bool engine = r.engine_int4() && cols % 2 == 0;
    if (!(engine && fused_source(w) && encode_fused(s, w, j.row0, j.rows, r.group))) {
      QR_TRY(read_rows(s, w, j.row0, j.rows));
      if (engine) {
        for (std::uint64_t i = 0; i < j.rows; ++i) {
          kernels::int4_encode_row(s.f32.data() + i * cols, cols, r.group,
                                   s.bytes.data() + i * cols / 2, s.scales.data() + i * groups);
        }
      } else {
        s.codes.resize(j.rows * cols);
        quantize_rows(s.f32.data(), j.rows, cols, r, s.codes.data(), s.scales.data());
        pack_job_codes(s, j.rows, cols, r);
      }
    }
    const PieceOffsets& at = piece_offsets_[j.unit][j.piece];
    QR_TRY(write_at(u.file, u.data, at.code_byte + code_bytes(j.row0, cols, r), s.bytes));
    return write_at(
        u.file, u.scales, 4 * (at.scale + j.row0 * groups),
        std::span(reinterpret_cast<const std::uint8_t*>(s.scales.data()), s.scales.size() * 4));
  }

  const Checkpoint& ck_;
  const ContainerPlan& plan_;
  const ContainerOptions& o_;
  std::string dir_;
  std::vector<FileState> files_;
  std::vector<Job> jobs_;
  std::vector<std::vector<PieceOffsets>> piece_offsets_;
  std::atomic<std::uint64_t> bytes_read_{0};
};

}  // namespace

Result<ContainerReport> write_container(const Checkpoint& ck, const ContainerPlan& plan,
                                        const ContainerOptions& o, const std::string& out_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  ContainerReport rep;
  {
    ContainerWriter w(ck, plan, o, out_dir);
    QR_TRY(w.run(rep));
  }
  if (plan.verify_copies) QR_TRY(verify_copied_tensors(ck, plan, out_dir));
  QR_TRY(stage_shards(ck, plan, out_dir, rep));
  QR_TRY(write_side_files(plan, out_dir));
  QR_TRY(write_container_manifest(ck, plan, o, out_dir, rep));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
