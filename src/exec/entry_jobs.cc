#include "exec/entry_jobs.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/exec/convert.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/schemes/e8_iq3.h"
#include "qrepack/schemes/fp8_block.h"
#include "qrepack/schemes/int_quant.h"

namespace qrepack {
namespace {

/// Rows of a weight (or bytes of a raw tensor) that one job converts.
struct Job {
  std::size_t entry = 0;               ///< index into ConvertPlan::entries
  std::uint64_t begin = 0, count = 0;  ///< rows of a weight, bytes of a raw tensor
  bool first = false;                  ///< the entry's first job
};

/// One job's buffers; reused by every job that lands in the slot.
struct Slot {
  RawVector<std::uint8_t> in;   ///< raw source rows
  RawVector<std::uint8_t> out;  ///< encoded rows (the bytes appended to the data tensor)
  RawVector<float> scales;      ///< the rows' scales (appended to the scale tensor)
  RawVector<float> f32;         ///< decoded block, for encodings that need all of it
  RawVector<float> row;         ///< one decoded row
};

template <typename T>
std::span<const std::uint8_t> bytes_of(std::span<const T> v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size_bytes()};
}

std::uint64_t weight_source_bytes(const LogicalWeight& w) {
  return WeightReader::rows_of(w) * WeightReader::stored_row_bytes(w, WeightReader::cols_of(w));
}

// Jobs of about job_bytes of f32; FP8-block outputs need whole 128-row blocks.
std::uint64_t rows_per_job(Encoding e, std::uint64_t cols, std::uint64_t job_bytes) {
  const std::uint64_t rows =
      std::max<std::uint64_t>(1, job_bytes / (4 * std::max<std::uint64_t>(cols, 1)));
  const bool blocks = e == Encoding::kFp8Block || e == Encoding::kFp8Container;
  return blocks ? std::max<std::uint64_t>(1, rows / 128) * 128 : rows;
}

// Encodes stored row `row` (bytes at raw) to int4 (group) or int8 with a kernel that decodes
// as it encodes, when its codes are FP8 or BF16. False when no such kernel applies or the row
// holds a non-finite value (the decoding path then reports which).
bool encode_row_fused(const WeightReader& reader, std::uint64_t row, const std::uint8_t* raw,
                      int bits, std::uint64_t group, std::uint8_t* out, float* scales) {
  using Kind = WeightReader::RowCodes::Kind;
  const WeightReader::RowCodes c = reader.row_codes(row);
  const std::uint64_t cols = reader.cols();
  const auto* half = reinterpret_cast<const std::uint16_t*>(raw);
  switch (c.kind) {
    case Kind::kFp8:
      return bits == 4
                 ? kernels::fp8_to_int4_row(raw, cols, c.block_scales, c.block_cols, group, out,
                                            scales)
                 : kernels::fp8_to_int8_row(raw, cols, c.block_scales, c.block_cols, out, scales);
    case Kind::kBf16:
      return bits == 4 ? kernels::bf16_to_int4_row(half, cols, group, out, scales)
                       : kernels::bf16_to_int8_row(half, cols, out, scales);
    case Kind::kOther:
      break;
  }
  return false;
}

// Encodes the int4 rows of an FP8 source from `row` on (raw bytes at raw) that share its block
// scales, all at once; returns how many, 0 when the source is not FP8 or a row holds a NaN.
std::uint64_t encode_fp8_int4_rows(const WeightReader& reader, std::uint64_t row,
                                   std::uint64_t max_rows, const std::uint8_t* raw,
                                   std::uint64_t group, std::uint8_t* out, float* scales) {
  const WeightReader::RowCodes c = reader.row_codes(row);
  if (c.kind != WeightReader::RowCodes::Kind::kFp8) return 0;
  const std::uint64_t rows = std::min(max_rows, c.shared_rows);
  return kernels::fp8_to_int4_rows(raw, rows, reader.cols(), c.block_scales, c.block_cols, group,
                                   out, scales)
             ? rows
             : 0;
}

// E8/IQ3 rows: each decoded row rotated in place, then encoded (the .qs tag is the caller's).
Status encode_e8_rows(const WeightReader& reader, const PlanEntry& e, std::uint64_t r,
                      std::uint64_t n, Slot& s) {
  const std::uint64_t cols = reader.cols(), raw_row = reader.raw_row_bytes();
  const std::uint64_t pb = e8_row_bytes(cols);
  s.out.resize(n * pb);
  s.row.resize(cols);
  for (std::uint64_t i = 0; i < n; ++i) {
    QR_TRY(reader.decode_rows(std::span<const std::uint8_t>(s.in).subspan(i * raw_row, raw_row),
                              r + i, 1, s.row));
    kernels::e8_rotate_row(s.row.data(), cols);
    if (!kernels::e8_encode_row(s.row.data(), cols, s.out.data() + i * pb)) {
      return Error(ErrorKind::kNonFiniteWeight,
                   fmt::format("row {}: a block's E8 super-scale sqrt(mean(w^2)) / 20 exceeds "
                               "fp16 (65504)",
                               r + i))
          .in_tensor(e.weight->name)
          .with_rule("e8.scale_range");
    }
  }
  return ok_status();
}

// Encodes rows [r, r + n) of the reader's weight from their raw bytes in s.in into s.out and
// s.scales, one row at a time (the decoded row stays in cache; int4 and int8 rows of FP8 and
// BF16 sources are never decoded to memory; FP8 int4 rows go a block row at a time). The first
// failing row is reported.
Status encode_rows(const WeightReader& reader, const PlanEntry& e, std::uint64_t r, std::uint64_t n,
                   Slot& s) {
  const std::uint64_t cols = reader.cols(), raw_row = reader.raw_row_bytes();
  const std::span<const std::uint8_t> in(s.in);
  // fused(i) encodes rows from i and says how many; when none, encode(i, decoded row) does
  // row i (decoding reports a non-finite value by name).
  const auto per_row_or_fused = [&](const auto& encode, const auto& fused) -> Status {
    s.row.resize(cols);
    for (std::uint64_t i = 0; i < n;) {
      const std::uint64_t done = fused(i);
      if (done > 0) {
        i += done;
        continue;
      }
      QR_TRY(reader.decode_rows(in.subspan(i * raw_row, raw_row), r + i, 1, s.row));
      encode(i, s.row.data());
      ++i;
    }
    return ok_status();
  };
  const auto per_row = [&](const auto& encode) {
    return per_row_or_fused(encode, [](std::uint64_t) { return std::uint64_t{0}; });
  };
  // Rows before it go one at a time: a block of FP8 rows from an earlier row held a NaN.
  std::uint64_t single_until = 0;
  switch (e.encoding) {
    case Encoding::kInt4: {
      const std::uint64_t g = e.group ? e.group : cols;
      const std::uint64_t ng = ceil_div(cols, g), pb = (cols + 1) / 2;
      s.out.resize(n * pb);
      s.scales.resize(n * ng);
      if (e.bits == 2) {  // qmax 1: the scalar reference (no kernel for this rare width)
        return per_row([&](std::uint64_t i, const float* row) {
          int4_encode_row(std::span(row, cols), e.group, std::span(s.out.data() + i * pb, pb),
                          std::span(s.scales.data() + i * ng, ng), 1);
        });
      }
      return per_row_or_fused(
          [&](std::uint64_t i, const float* row) {
            kernels::int4_encode_row(row, cols, e.group, s.out.data() + i * pb,
                                     s.scales.data() + i * ng);
          },
          [&](std::uint64_t i) -> std::uint64_t {
            const std::uint8_t* raw = in.data() + i * raw_row;
            std::uint8_t* out = s.out.data() + i * pb;
            if (i >= single_until) {
              const std::uint64_t done = encode_fp8_int4_rows(reader, r + i, n - i, raw, e.group,
                                                              out, s.scales.data() + i * ng);
              if (done > 0) return done;
              single_until = i + reader.row_codes(r + i).shared_rows;
            }
            return encode_row_fused(reader, r + i, raw, 4, e.group, out, s.scales.data() + i * ng);
          });
    }
    case Encoding::kInt2: {
      const std::uint64_t pb = int2_row_bytes(cols);
      s.out.resize(n * pb);
      s.scales.resize(n);
      return per_row([&](std::uint64_t i, const float* row) {
        s.scales[i] = int2_encode_row(std::span(row, cols), std::span(s.out.data() + i * pb, pb));
      });
    }
    case Encoding::kInt3: {
      const std::uint64_t pb = int3_row_bytes(cols), ng = ceil_div(cols, kInt3Group);
      s.out.resize(n * pb);
      s.scales.resize(n * ng);
      return per_row([&](std::uint64_t i, const float* row) {
        int3_encode_row(std::span(row, cols), std::span(s.out.data() + i * pb, pb),
                        std::span(s.scales.data() + i * ng, ng));
      });
    }
    case Encoding::kInt8:
      s.out.resize(n * cols);
      s.scales.resize(n);
      return per_row_or_fused(
          [&](std::uint64_t i, const float* row) {
            s.scales[i] = kernels::int8_encode_row(row, cols, s.out.data() + i * cols);
          },
          [&](std::uint64_t i) -> std::uint64_t {
            return encode_row_fused(reader, r + i, in.data() + i * raw_row, 8, 0,
                                    s.out.data() + i * cols, s.scales.data() + i);
          });
    case Encoding::kE8:
      return encode_e8_rows(reader, e, r, n, s);
    case Encoding::kBf16:
      s.out.resize(n * cols * 2);
      return per_row([&](std::uint64_t i, const float* row) {
        kernels::f32_to_bf16(row, cols,
                             reinterpret_cast<std::uint16_t*>(s.out.data() + i * cols * 2));
      });
    default:
      break;
  }
  // f32 and FP8-block outputs need the whole decoded block.
  s.f32.resize(n * cols);
  QR_TRY(reader.decode_rows(in, r, n, s.f32));
  if (e.encoding == Encoding::kF32) {
    s.out.resize(n * cols * 4);
    std::memcpy(s.out.data(), s.f32.data(), s.out.size());
    return ok_status();
  }
  const Fp8BlockShape bs{n, cols};
  s.out.resize(n * cols);
  s.scales.resize(bs.scale_rows() * bs.scale_cols());
  fp8_block_encode(s.f32, bs, s.out, s.scales);
  return ok_status();
}

// FP8 sources go into the fmt-8 container with their codes unchanged when their scales are
// (or expand exactly to) 128x128 blocks aligned with the weight's rows: block-scaled at 128,
// or one per-tensor scale. Others are requantized by fp8_block_encode.
bool copies_fp8_codes(const LogicalWeight& w) {
  if (w.encoding == SourceEncoding::kFp8Tensor) return true;
  return w.encoding == SourceEncoding::kFp8Block && w.block_rows == 128 && w.block_cols == 128 &&
         w.row0 % 128 == 0;
}

// The job's codes are in s.out: refuses NaN codes (the engine would compute with them) and
// sets s.scales to the scales of the job's 128-row blocks.
Status fp8_codes_and_scales(const WeightReader& reader, const LogicalWeight& w, const Job& job,
                            Slot& s) {
  for (std::size_t i = 0; i < s.out.size(); ++i) {
    if ((s.out[i] & 0x7F) == 0x7F) {
      return Error(ErrorKind::kNonFiniteWeight,
                   fmt::format("row {} holds the E4M3 NaN code 0x{:02X}",
                               job.begin + i / reader.cols(), s.out[i]))
          .in_tensor(w.name)
          .with_rule("weights.finite");
    }
  }
  const std::uint64_t nbi = ceil_div(reader.cols(), 128), b0 = job.begin / 128;
  const std::uint64_t nbr = ceil_div(job.count, 128);
  if (w.encoding == SourceEncoding::kFp8Tensor) {
    s.scales.assign(nbr * nbi, reader.scales()[0]);
    return ok_status();
  }
  const auto all = reader.scales().subspan((reader.scale_row0() + b0) * nbi, nbr * nbi);
  s.scales.assign(all.begin(), all.end());
  return ok_status();
}

// Reads and encodes one job into its slot.
Status produce(const Checkpoint& ck, const ConvertPlan& plan, const Job& job, WeightReader& reader,
               Slot& s) {
  s.out.clear();
  s.scales.clear();
  const PlanEntry& e = plan.entries[job.entry];
  if (!e.weight) {  // a raw tensor kept by --keep-unknown
    s.out.resize(job.count);
    return ck.read(e.raw, job.begin, s.out);
  }
  QR_TRY(reader.open(*e.weight));
  const std::uint64_t raw_bytes = job.count * reader.raw_row_bytes();
  if (e.encoding == Encoding::kRaw) {
    s.out.resize(raw_bytes);
    QR_TRY(reader.read_raw_rows(job.begin, job.count, s.out));
    if (job.first && e.outputs.size() == 2) {  // FP8 kept bitwise: the slice's scale rows
      const TensorView& st = plan.outputs[e.outputs[1]];
      const std::uint64_t n = st.shape[0] * st.shape[1];
      const auto all = reader.scales().subspan(reader.scale_row0() * st.shape[1], n);
      s.scales.assign(all.begin(), all.end());
    }
    return ok_status();
  }
  if (e.encoding == Encoding::kFp8Container && copies_fp8_codes(*e.weight)) {
    s.out.resize(raw_bytes);
    QR_TRY(reader.read_raw_rows(job.begin, job.count, s.out));
    return fp8_codes_and_scales(reader, *e.weight, job, s);
  }
  s.in.resize(raw_bytes);
  QR_TRY(reader.read_raw_rows(job.begin, job.count, s.in));
  QR_TRY(encode_rows(reader, e, job.begin, job.count, s));
  if (e.encoding == Encoding::kE8 && job.first) s.scales.assign(1, kE8Tag);  // the fmt 6 tag
  return ok_status();
}

}  // namespace

std::uint64_t source_bytes(const ConvertPlan& plan) {
  std::uint64_t total = 0;
  for (const PlanEntry& e : plan.entries) {
    total += e.weight ? weight_source_bytes(*e.weight) : e.raw.entry->byte_size();
  }
  return total;
}

namespace {

// Rows of a weight (bytes of a raw tensor) and how many one job takes.
std::pair<std::uint64_t, std::uint64_t> rows_and_step(const PlanEntry& e, std::uint64_t job_bytes) {
  if (!e.weight) return {e.raw.entry->byte_size(), job_bytes};
  return {WeightReader::rows_of(*e.weight),
          rows_per_job(e.encoding, WeightReader::cols_of(*e.weight), job_bytes)};
}

class EntryJobs final : public FileJobSource {
 public:
  EntryJobs(const Checkpoint& ck, const ConvertPlan& plan, const ShardPlan& shards,
            std::uint64_t job_bytes, OutputHashes& hashes)
      : ck_(ck), plan_(plan), shards_(shards), job_bytes_(job_bytes), hashes_(hashes) {
    const std::size_t threads = std::max<std::size_t>(1, thread_count());
    readers_.reserve(threads);
    for (std::size_t t = 0; t < threads; ++t) {
      readers_.emplace_back(ck, plan.recognized.block_rows, plan.recognized.block_cols);
    }
    slots_.resize(threads);
    offsets_.reserve(shards.specs.size());
    for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
      std::uint64_t off = 0;
      for (const TensorView& t : shards.layouts[s].tensors) {
        offsets_.push_back(off);
        off += data_bytes(t);
      }
    }
  }

  /// Data offset of output i in its shard.
  std::uint64_t offset_of(std::size_t i) const { return offsets_[i]; }

  // Each entry's jobs, listed under the first of its outputs' shards that is written.
  Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) override {
    write_ = write;
    for (std::size_t ei = 0; ei < plan_.entries.size(); ++ei) {
      const PlanEntry& e = plan_.entries[ei];
      std::uint32_t files[2] = {FileJob::kNone, FileJob::kNone};
      std::size_t n = 0;
      for (const std::size_t o : e.outputs) {
        const auto s = static_cast<std::uint32_t>(shards_.shard_of(o));
        if (write[s] && (n == 0 || files[n - 1] != s)) files[n++] = s;
      }
      if (n == 0) continue;  // another worker's, or reused
      const auto [total, step] = rows_and_step(e, job_bytes_);
      for (std::uint64_t b = 0; b < total || (b == 0 && total == 0); b += step) {
        FileJob j;
        j.file = files[0];
        j.file2 = files[1];
        j.unit = static_cast<std::uint32_t>(ei);
        j.first = b;
        j.count = std::min(step, total - b);
        out.push_back(j);
        if (total == 0) break;
      }
    }
    return ok_status();
  }

  Result<std::uint64_t> run(const FileJob& fj, std::size_t worker, FileWriter& w) override {
    const PlanEntry& e = plan_.entries[fj.unit];
    const Job job{fj.unit, fj.first, fj.count, fj.first == 0};
    Slot& s = slots_[worker];
    QR_TRY(produce(ck_, plan_, job, readers_[worker], s));
    // An entry done in one job: its outputs' hashes from the bytes at hand, not read back.
    const auto [total, step] = rows_and_step(e, job_bytes_);
    if (job.begin == 0 && job.count == total) {
      hashes_.set(e.outputs[0], XXH64(s.out.data(), s.out.size(), 0));
      if (e.outputs.size() == 2) {
        hashes_.set(e.outputs[1], XXH64(s.scales.data(), s.scales.size() * sizeof(float), 0));
      }
    }
    (void)step;
    if (!s.out.empty()) {
      const std::uint64_t row_bytes = job.count ? s.out.size() / job.count : 0;
      const std::uint64_t at = e.weight ? job.begin * row_bytes : job.begin;
      QR_TRY(write_output(e.outputs[0], at, s.out, w));
    }
    if (!s.scales.empty() && e.outputs.size() == 2) {
      QR_TRY(write_output(e.outputs[1], scale_offset(e, job, s) * 4,
                          bytes_of(std::span<const float>(s.scales)), w));
    }
    return e.weight ? job.count * WeightReader::stored_row_bytes(*e.weight,
                                                                 WeightReader::cols_of(*e.weight))
                    : job.count;
  }

 private:
  // Where a job's scales start in its entry's scale tensor, in floats.
  static std::uint64_t scale_offset(const PlanEntry& e, const Job& job, const Slot& s) {
    switch (e.encoding) {
      case Encoding::kFp8Block:
      case Encoding::kFp8Container:
        return job.begin / 128 * ceil_div(WeightReader::cols_of(*e.weight), 128);
      case Encoding::kE8:
      case Encoding::kRaw:
        return 0;  // written whole by the first job
      default:
        return job.count ? job.begin * (s.scales.size() / job.count) : 0;
    }
  }

  // Output i's bytes at `at`, unless its shard is not written by this run (reused, or
  // another worker's) while the entry's other output's is.
  Status write_output(std::size_t i, std::uint64_t at, std::span<const std::uint8_t> bytes,
                      FileWriter& w) {
    const auto s = static_cast<std::uint32_t>(shards_.shard_of(i));
    if (!write_[s]) return ok_status();
    return w.write(s, offsets_[i] + at, bytes);
  }

  const Checkpoint& ck_;
  const ConvertPlan& plan_;
  const ShardPlan& shards_;
  std::uint64_t job_bytes_;
  std::vector<WeightReader> readers_;
  std::vector<Slot> slots_;
  std::vector<std::uint64_t> offsets_;  ///< per output, in its shard's data
  std::vector<bool> write_;             ///< per shard: written by this run
  OutputHashes& hashes_;
};

}  // namespace

Result<std::uint64_t> write_shards(
    const Checkpoint& ck, const ConvertPlan& plan, const ShardPlan& shards,
    const std::vector<bool>& write, const std::string& dir, std::uint64_t job_bytes,
    OutputHashes& hashes, ProgressLine* progress,
    const std::function<Status(std::size_t, std::uint64_t)>& on_done) {
  EntryJobs source(ck, plan, shards, job_bytes, hashes);
  std::vector<OutputFile> files;
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    files.push_back({shards.file_names[s], &shards.layouts[s]});
  }
  FileJobsConfig config = fault_hooks_from_env();
  if (progress) {
    config.on_progress = [progress](std::uint64_t read) { progress->update("converting", read); };
  }
  const auto done = [&](std::size_t s) -> Status {
    const std::string path = (std::filesystem::path(dir) / shards.file_names[s]).string();
    const SafetensorsLayout& layout = shards.layouts[s];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    std::vector<std::size_t> read_back;  // outputs written by more than one job
    for (std::size_t k = 0; k < layout.tensors.size(); ++k) {
      const std::size_t i = shards.first[s] + k;
      hashes.add_written(data_bytes(layout.tensors[k]));
      if (hashes.known(i)) continue;
      read_back.push_back(i);
      ranges.emplace_back(layout.header_size + source.offset_of(i), data_bytes(layout.tensors[k]));
    }
    if (on_done) ranges.emplace_back(0, layout.file_size());  // the whole file, last
    QR_ASSIGN_OR_RETURN(h, xxhash64_of_ranges(path, ranges));
    for (std::size_t k = 0; k < read_back.size(); ++k) hashes.set(read_back[k], h[k]);
    if (!on_done) return ok_status();
    const std::uint64_t file_hash = h.back();
    return on_done(s, file_hash);
  };
  auto read = run_file_jobs(files, write, dir, source, config, done);
  if (!read.ok()) return std::move(read.error().in_file(ck.directory()));
  return *read;
}

}  // namespace qrepack
