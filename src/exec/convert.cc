#include "qrepack/exec/convert.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "core/version.h"
#include "io/json_strict.h"
#include "kernels/kernels.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/io/side_files.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/parallel/serial_worker.h"
#include "qrepack/schemes/fp8_block.h"
#include "qrepack/schemes/int_quant.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::span<const std::uint8_t> bytes_of(std::span<const T> v) {
  return {reinterpret_cast<const std::uint8_t*>(v.data()), v.size_bytes()};
}

// Appends to the writer while hashing each output tensor.
class HashingOutput {
 public:
  explicit HashingOutput(CheckpointWriter& w) : w_(w), state_(XXH64_createState()) {}
  ~HashingOutput() { XXH64_freeState(state_); }
  Status begin(const std::string& name) {
    QR_TRY(finish_current());
    current_ = name;
    XXH64_reset(state_, 0);
    return w_.begin_tensor(name);
  }
  Status append(std::span<const std::uint8_t> b) {
    XXH64_update(state_, b.data(), b.size());
    written_ += b.size();
    return w_.append(b);
  }
  Status skip(const std::string& name, std::uint64_t hash) {
    QR_TRY(finish_current());
    hashes_[name] = hash;
    return w_.skip_tensor(name);
  }
  void set_hash(const std::string& name, std::uint64_t hash) { hashes_[name] = hash; }
  Status finish_current() {
    if (!current_.empty()) hashes_[current_] = XXH64_digest(state_);
    current_.clear();
    return ok_status();
  }
  const std::unordered_map<std::string, std::uint64_t>& hashes() const { return hashes_; }
  std::uint64_t written() const { return written_; }

 private:
  CheckpointWriter& w_;
  XXH64_state_t* state_;
  std::string current_;
  std::unordered_map<std::string, std::uint64_t> hashes_;
  std::uint64_t written_ = 0;
};

struct Buffers {
  SerialWorker* io = nullptr;                     ///< reads ahead and writes behind
  std::array<std::vector<std::uint8_t>, 2> in;    ///< raw source rows, two blocks in flight
  std::array<std::vector<std::uint8_t>, 2> outb;  ///< encoded rows, two blocks in flight
  std::vector<std::uint8_t> bytes;                ///< raw copies of kept tensors
  std::vector<float> f32;               ///< decoded rows (for encodings that need the block)
  std::vector<float> scales;            ///< the weight's scales so far
  std::vector<std::vector<float>> row;  ///< one decoded row per worker thread
};

// Encodes rows [r, r + n) of the current weight from their raw bytes `in` into `bytes` (and
// buf.scales). Rows are split over the thread pool; every row's output has a fixed place, so
// the bytes do not depend on the thread count. The first failing row (in row order) is
// reported.
Status encode_block(const WeightReader& reader, const PlanEntry& e, std::uint64_t r,
                    std::uint64_t n, std::uint64_t cols, std::span<const std::uint8_t> in,
                    std::vector<std::uint8_t>& bytes, Buffers& buf) {
  const std::uint64_t raw_row = reader.raw_row_bytes();
  const std::size_t workers = thread_count();
  std::vector<Status> failed(workers, ok_status());
  std::vector<std::uint64_t> failed_row(workers, ~std::uint64_t{0});
  const auto decode = [&](std::uint64_t i, std::size_t w, std::span<float> into) {
    auto st = reader.decode_rows(in.subspan(i * raw_row, raw_row), r + i, 1, into);
    if (!st.ok() && i < failed_row[w]) {
      failed_row[w] = i;
      failed[w] = std::move(st);
    }
    return failed_row[w] == ~std::uint64_t{0};
  };
  const auto first_failure = [&]() -> Status {
    std::size_t best = workers;
    for (std::size_t w = 0; w < workers; ++w) {
      if (failed_row[w] != ~std::uint64_t{0} &&
          (best == workers || failed_row[w] < failed_row[best]))
        best = w;
    }
    return best == workers ? ok_status() : std::move(failed[best]);
  };
  buf.row.resize(workers);
  for (auto& v : buf.row) v.resize(cols);
  // Waking a worker costs tens of microseconds in a VM: split only blocks worth it.
  const std::size_t min_rows = std::max<std::uint64_t>(1, (std::uint64_t{1} << 16) / cols);
  // Decodes each row into the worker's row buffer, then hands it to encode(i, row).
  const auto per_row = [&](const auto& encode) {
    parallel_for(n, min_rows, [&](std::size_t b, std::size_t end, std::size_t w) {
      for (std::size_t i = b; i < end; ++i) {
        if (!decode(i, w, buf.row[w])) return;
        encode(i, buf.row[w].data());
      }
    });
    return first_failure();
  };
  switch (e.encoding) {
    case Encoding::kInt4: {
      const std::uint64_t g = e.group ? e.group : cols;
      const std::uint64_t ng = ceil_div(cols, g), pb = (cols + 1) / 2;
      bytes.resize(n * pb);
      const std::size_t s0 = buf.scales.size();
      buf.scales.resize(s0 + n * ng);
      return per_row([&](std::size_t i, const float* row) {
        kernels::int4_encode_row(row, cols, e.group, bytes.data() + i * pb,
                                 buf.scales.data() + s0 + i * ng);
      });
    }
    case Encoding::kInt8: {
      bytes.resize(n * cols);
      const std::size_t s0 = buf.scales.size();
      buf.scales.resize(s0 + n);
      return per_row([&](std::size_t i, const float* row) {
        buf.scales[s0 + i] = kernels::int8_encode_row(row, cols, bytes.data() + i * cols);
      });
    }
    case Encoding::kBf16:
      bytes.resize(n * cols * 2);
      return per_row([&](std::size_t i, const float* row) {
        kernels::f32_to_bf16(row, cols,
                             reinterpret_cast<std::uint16_t*>(bytes.data() + i * cols * 2));
      });
    default:
      break;
  }
  // f32 and fp8-block outputs need the whole decoded block.
  buf.f32.resize(n * cols);
  parallel_for(n, min_rows, [&](std::size_t b, std::size_t end, std::size_t w) {
    for (std::size_t i = b; i < end; ++i) {
      if (!decode(i, w, std::span(buf.f32).subspan(i * cols, cols))) return;
    }
  });
  QR_TRY(first_failure());
  if (e.encoding == Encoding::kF32) {
    bytes.resize(n * cols * 4);
    std::memcpy(bytes.data(), buf.f32.data(), bytes.size());
    return ok_status();
  }
  const Fp8BlockShape bs{n, cols};
  bytes.resize(n * cols);
  const std::size_t s0 = buf.scales.size();
  buf.scales.resize(s0 + bs.scale_cols());
  fp8_block_encode(buf.f32, bs, bytes, std::span(buf.scales).subspan(s0));
  return ok_status();
}

std::uint64_t block_rows_for(std::uint64_t cols) {
  return std::max<std::uint64_t>(1, kRowBlockBytes / (4 * std::max<std::uint64_t>(cols, 1)));
}

Status write_entry(const Checkpoint& ck, const ConvertPlan& plan, const PlanEntry& e,
                   WeightReader& reader, HashingOutput& out, Buffers& buf,
                   std::uint64_t& bytes_read) {
  const auto& outs = plan.outputs;
  if (!e.weight) {  // a raw tensor kept by --keep-unknown
    QR_TRY(out.begin(outs[e.outputs[0]].name));
    const std::uint64_t size = e.raw.entry->byte_size();
    buf.bytes.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, kRowBlockBytes)));
    for (std::uint64_t off = 0; off < size; off += buf.bytes.size()) {
      const auto n =
          static_cast<std::size_t>(std::min<std::uint64_t>(buf.bytes.size(), size - off));
      QR_TRY(ck.read(e.raw, off, std::span(buf.bytes.data(), n)));
      QR_TRY(out.append(std::span(buf.bytes.data(), n)));
    }
    bytes_read += size;
    return ok_status();
  }
  const LogicalWeight& w = *e.weight;
  QR_TRY(reader.open(w));
  const std::uint64_t rows = reader.rows(), cols = reader.cols();
  const std::uint64_t step = e.encoding == Encoding::kFp8Block ? 128 : block_rows_for(cols);
  QR_TRY(out.begin(outs[e.outputs[0]].name));
  buf.scales.clear();

  if (e.encoding == Encoding::kRaw) {
    const std::uint64_t esize = dtype_info(w.source_dtype).bits / 8;
    for (std::uint64_t r = 0; r < rows; r += step) {
      const std::uint64_t n = std::min(step, rows - r);
      buf.bytes.resize(n * cols * esize);
      QR_TRY(reader.read_raw_rows(r, n, buf.bytes));
      QR_TRY(out.append(buf.bytes));
    }
    bytes_read += rows * cols * esize;
    if (e.outputs.size() == 2) {  // FP8 kept bitwise: the slice's scale rows
      const auto& st = outs[e.outputs[1]];
      const std::uint64_t n = st.shape[0] * st.shape[1];
      const auto all = reader.scales();
      QR_TRY(out.begin(st.name));
      QR_TRY(out.append(bytes_of(all.subspan(reader.scale_row0() * st.shape[1], n))));
    }
    return ok_status();
  }

  // Pipeline: the I/O lane reads block b + 1 and writes block b - 1 while the pool encodes
  // block b. The lane runs in order, so waiting for block b's read also means block b - 2's
  // write (whose buffer block b reuses) is done.
  const std::uint64_t raw_row = reader.raw_row_bytes();
  SerialWorker& io = *buf.io;
  const std::uint64_t blocks = ceil_div(rows, step);
  const auto submit_read = [&](std::uint64_t b) {
    const std::uint64_t r = b * step, n = std::min(step, rows - r);
    auto& in = buf.in[b % 2];
    in.resize(n * raw_row);
    return io.submit([&reader, &in, r, n] { return reader.read_raw_rows(r, n, in); });
  };
  if (blocks == 1) {  // nothing to overlap: no hand-offs to the I/O lane
    auto& in = buf.in[0];
    in.resize(rows * raw_row);
    QR_TRY(reader.read_raw_rows(0, rows, in));
    bytes_read += rows * raw_row;
    QR_TRY(encode_block(reader, e, 0, rows, cols, in, buf.outb[0], buf));
    QR_TRY(out.append(buf.outb[0]));
  } else {
    std::uint64_t read_ticket = submit_read(0);
    for (std::uint64_t b = 0; b < blocks; ++b) {
      const std::uint64_t r = b * step, n = std::min(step, rows - r);
      QR_TRY(io.wait(read_ticket));
      if (b + 1 < blocks) read_ticket = submit_read(b + 1);
      bytes_read += n * raw_row;
      auto& encoded = buf.outb[b % 2];
      QR_TRY(encode_block(reader, e, r, n, cols, buf.in[b % 2], encoded, buf));
      io.submit([&out, &encoded] { return out.append(encoded); });
    }
    QR_TRY(io.wait_all());
  }
  if (e.outputs.size() == 2) {
    QR_TRY(out.begin(outs[e.outputs[1]].name));
    QR_TRY(out.append(bytes_of(std::span<const float>(buf.scales))));
  }
  return ok_status();
}

// Identifies the output layout: any change of source header, plan or shard split changes it.
std::string plan_fingerprint(const Checkpoint& ck, const ShardPlan& shards) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  auto feed = [&](const std::string& s) { XXH64_update(st, s.data(), s.size() + 1); };
  for (const TensorRef& t : ck.tensors()) {
    feed(fmt::format("{}|{}|{}|{}", t.entry->name, static_cast<int>(t.entry->dtype),
                     fmt::join(t.entry->shape, ","), t.entry->byte_size()));
  }
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    feed(shards.file_names[s]);
    for (const auto& t : shards.layouts[s].tensors) {
      feed(fmt::format("{}|{}|{}", t.name, static_cast<int>(t.dtype), fmt::join(t.shape, ",")));
    }
  }
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", h);
}

Status write_json_atomically(const std::string& path, const nlohmann::ordered_json& j) {
  const std::string text = j.dump(1) + "\n";
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())));
  return sink->commit();
}

Result<ConvertReport> finish_conversion(
    const Checkpoint& ck, const ConvertPlan& plan, const ConvertOptions& o,
    const std::string& out_dir, const nlohmann::json& parameters, CheckpointWriter& writer_ref,
    HashingOutput& out, const std::unordered_map<std::string, std::string>& shard_by_name,
    const std::unordered_map<std::string, std::uint64_t>& previous_hashes, ConvertReport rep,
    std::chrono::steady_clock::time_point t0, std::size_t shard_count,
    const std::string& progress_path, bool parts_only) {
  CheckpointWriter* writer = &writer_ref;
  WeightReader reader(ck, plan.recognized.block_rows, plan.recognized.block_cols);
  Buffers buf;
  SerialWorker io;  // after buf: destroyed first, it waits for tasks that use buf's buffers
  buf.io = &io;
  std::uint64_t total = 0;
  for (const PlanEntry& e : plan.entries) {
    total += e.weight ? checked_numel(e.weight->shape).value_or(0) *
                            (dtype_info(e.weight->source_dtype).bits / 8)
                      : e.raw.entry->byte_size();
  }
  ProgressLine progress(total, o.progress);
  for (const PlanEntry& e : plan.entries) {
    bool all_reused = true;
    for (std::size_t i : e.outputs)
      all_reused = all_reused && writer->is_reused(plan.outputs[i].name);
    if (all_reused) {
      for (std::size_t i : e.outputs) {
        const std::string& n = plan.outputs[i].name;
        QR_TRY(out.skip(n, previous_hashes.at(n)));
      }
      continue;
    }
    progress.update(e.weight ? e.weight->name : e.raw.entry->name, rep.bytes_read);
    auto st = write_entry(ck, plan, e, reader, out, buf, rep.bytes_read);
    if (!st.ok()) return std::move(st.error().in_file(ck.directory()));
  }
  QR_TRY(out.finish_current());
  progress.update("writing the manifest and index", rep.bytes_read);
  progress.finish();
  if (parts_only) {  // one worker of --shard I/N: its shards only; merge writes the rest
    QR_TRY(writer->finish_shards());
    rep.outputs = plan.outputs.size();
    rep.shards = shard_count;
    rep.bytes_written = out.written();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
  }

  nlohmann::ordered_json m;
  m["qrepack_version"] = kVersion;
  m["parameters"] = parameters;
  m["source"] = {
      {"path", ck.directory()}, {"tensors", ck.tensors().size()}, {"bytes", ck.total_size()}};
  nlohmann::ordered_json outputs = nlohmann::json::array();
  for (const PlanEntry& e : plan.entries) {
    for (std::size_t i : e.outputs) {
      const TensorSpec& t = plan.outputs[i];
      const std::uint64_t bytes =
          dtype_byte_size(t.dtype, checked_numel(t.shape).value_or(0)).value_or(0);
      outputs.push_back(
          {{"name", t.name},
           {"dtype", dtype_info(t.dtype).safetensors},
           {"shape", t.shape},
           {"bytes", bytes},
           {"encoding", e.encoding == Encoding::kRaw ? "raw" : encoding_name(e.encoding, e.group)},
           {"group", e.group},
           {"class", weight_class_name(e.cls)},
           {"rule", e.rule},
           {"shard", shard_by_name.at(t.name)},
           {"xxhash64", fmt::format("{:016x}", out.hashes().at(t.name))}});
    }
  }
  nlohmann::ordered_json sources = nlohmann::json::array();
  for (const SourceRecord& s : plan.sources) {
    sources.push_back({{"name", s.name},
                       {"disposition", s.disposition},
                       {"rule", s.rule},
                       {"outputs", s.outputs}});
  }
  m["sources"] = sources;
  m["outputs"] = outputs;
  const std::string text = m.dump(1) + "\n";
  QR_ASSIGN_OR_RETURN(manifest,
                      AtomicFileSink::create((fs::path(out_dir) / "qrepack.json").string()));
  QR_TRY(
      manifest->write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())));
  QR_TRY(manifest->prepare());
  writer->stage(std::move(manifest));
  QR_ASSIGN_OR_RETURN(side, stage_side_files(ck.directory(), out_dir));
  for (auto& f : side) writer->stage(std::move(f));
  QR_TRY(writer->finish());
  if (!progress_path.empty()) {
    std::error_code ec;
    fs::remove(progress_path, ec);  // the run is complete: the manifest replaces the progress
  }
  rep.outputs = plan.outputs.size();
  rep.shards = shard_count;
  rep.bytes_written = out.written();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace

std::vector<bool> assign_output_shards(const std::vector<std::uint64_t>& shard_bytes,
                                       const ShardTask& task) {
  std::uint64_t total = 0;
  for (auto b : shard_bytes) total += b;
  std::vector<bool> mine(shard_bytes.size(), false);
  std::uint64_t before = 0;
  for (std::size_t s = 0; s < shard_bytes.size(); ++s) {
    // IEEE double: the same on every machine running this binary.
    const double mid = static_cast<double>(before) + static_cast<double>(shard_bytes[s]) / 2;
    const std::size_t owner = total ? static_cast<std::size_t>(mid / static_cast<double>(total) *
                                                               static_cast<double>(task.count))
                                    : s % task.count;
    mine[s] = std::min(owner, task.count - 1) == task.index;
    before += shard_bytes[s];
  }
  return mine;
}

std::string part_file_name(const ShardTask& task) {
  return fmt::format(".qrepack-part-{}-of-{}.json", task.index, task.count);
}

Result<ConvertReport> execute_conversion(const Checkpoint& ck, const ConvertPlan& plan,
                                         const ConvertOptions& o, const std::string& out_dir,
                                         const nlohmann::json& parameters, bool resume,
                                         const ShardTask* shard) {
  const auto t0 = std::chrono::steady_clock::now();
  if (shard) resume = true;  // a worker reuses what it already published
  QR_ASSIGN_OR_RETURN(shards, plan_shards(plan.outputs, o.max_shard_bytes, {{"format", "pt"}}));
  std::unordered_map<std::string, std::string> shard_by_name;
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    for (const auto& t : shards.layouts[s].tensors) shard_by_name[t.name] = shards.file_names[s];
  }
  const std::size_t shard_count = shards.file_names.size();
  ConvertReport rep;
  const std::string progress_path =
      (fs::path(out_dir) / (shard ? part_file_name(*shard) : std::string(kProgressFileName)))
          .string();
  const std::string fingerprint = plan_fingerprint(ck, shards);
  nlohmann::ordered_json progress;
  std::unordered_map<std::string, std::uint64_t> previous_hashes;
  std::unique_ptr<CheckpointWriter> writer;
  if (resume) {
    CheckpointWriter::Incremental inc;
    inc.reuse.assign(shard_count, false);
    progress = {{"parameters", parameters},
                {"fingerprint", fingerprint},
                {"shards", nlohmann::json::object()}};
    std::vector<bool> mine(shard_count, true);
    if (shard) {
      std::vector<std::uint64_t> sizes;
      for (const auto& l : shards.layouts) sizes.push_back(l.data_size);
      mine = assign_output_shards(sizes, *shard);
      progress["part"] = {{"index", shard->index}, {"count", shard->count}};
      progress["source"] = ck.directory();
      progress["plan_shards"] = shards.file_names;
    }
    std::error_code ec;
    if (fs::exists(progress_path, ec)) {
      QR_ASSIGN_OR_RETURN(src, FileSource::open(progress_path));
      std::string text(src->size(), '\0');
      QR_TRY(src->read_at(0, std::span(reinterpret_cast<std::uint8_t*>(text.data()), text.size())));
      auto parsed = parse_json_strict(text, ErrorKind::kParameterMismatch);
      if (!parsed.ok()) return std::move(parsed.error().in_file(progress_path));
      const nlohmann::json& prev = *parsed;
      if (!prev.contains("parameters") || prev["parameters"] != nlohmann::json(parameters)) {
        return Error(ErrorKind::kParameterMismatch,
                     fmt::format("the earlier partial run used parameters {}, this run {}; "
                                 "finish it with the same flags or use a new output directory",
                                 prev.value("parameters", nlohmann::json()).dump(),
                                 nlohmann::json(parameters).dump()))
            .in_file(progress_path)
            .with_rule("resume.same_parameters");
      }
      if (prev.value("fingerprint", "") != fingerprint) {
        return Error(ErrorKind::kParameterMismatch,
                     "the earlier partial run had another source layout or shard plan")
            .in_file(progress_path)
            .with_rule("resume.same_plan");
      }
      for (std::size_t s = 0; s < shard_count; ++s) {
        const std::string& f = shards.file_names[s];
        if (!prev["shards"].contains(f)) continue;
        const auto& rec = prev["shards"][f];
        auto file = FileSource::open((fs::path(out_dir) / f).string());
        if (!file.ok()) continue;  // gone: write it again
        QR_ASSIGN_OR_RETURN(h, xxhash64_of(**file));
        if (fmt::format("{:016x}", h) != rec.value("xxhash64", "")) continue;  // damaged: redo
        inc.reuse[s] = true;
        ++rep.reused_shards;
        progress["shards"][f] = rec;
        for (const auto& [name, th] : rec["tensors"].items()) {
          previous_hashes[name] = std::stoull(th.get<std::string>(), nullptr, 16);
        }
      }
    } else if (!shard) {
      for (const auto& e : fs::directory_iterator(out_dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.ends_with(".safetensors") && n[0] != '.') {
          return Error(ErrorKind::kOutputExists,
                       fmt::format("output directory holds {} but no {} to resume from", n,
                                   kProgressFileName))
              .in_file(out_dir)
              .with_rule("resume.progress");
        }
      }
    }
    // Another worker's shards: not written here (their tensors are skipped).
    for (std::size_t si = 0; si < shard_count; ++si) {
      if (mine[si] || inc.reuse[si]) continue;
      inc.reuse[si] = true;
      for (const auto& t : shards.layouts[si].tensors) previous_hashes[t.name] = 0;
    }
    for (std::size_t si = 0; si < shard_count; ++si) rep.shards_written += !inc.reuse[si];
    HashingOutput* out_ptr = nullptr;
    inc.on_published = [&, out_dir](std::size_t s, std::uint64_t file_hash) -> Status {
      nlohmann::ordered_json tensors;
      for (const auto& t : shards.layouts[s].tensors) {
        tensors[t.name] = fmt::format("{:016x}", out_ptr->hashes().at(t.name));
      }
      progress["shards"][shards.file_names[s]] = {{"xxhash64", fmt::format("{:016x}", file_hash)},
                                                  {"tensors", tensors}};
      return write_json_atomically(progress_path, progress);
    };
    auto shards_copy = shards;
    QR_ASSIGN_OR_RETURN(
        w, CheckpointWriter::create_incremental(out_dir, std::move(shards_copy), std::move(inc)));
    writer = std::move(w);
    HashingOutput out(*writer);
    out_ptr = &out;
    for (const auto& [name, h] : previous_hashes) out.set_hash(name, h);
    if (shard) QR_TRY(write_json_atomically(progress_path, progress));  // even with no shards
    return finish_conversion(ck, plan, o, out_dir, parameters, *writer, out, shard_by_name,
                             previous_hashes, rep, t0, shard_count, progress_path,
                             shard != nullptr);
  }
  rep.shards_written = shard_count;
  QR_ASSIGN_OR_RETURN(w, CheckpointWriter::create(out_dir, std::move(shards)));
  writer = std::move(w);
  HashingOutput out(*writer);
  return finish_conversion(ck, plan, o, out_dir, parameters, *writer, out, shard_by_name,
                           previous_hashes, rep, t0, shard_count, "", false);
}

}  // namespace qrepack
