// colibri-olmoe from GGUF: writing a plan (src/targets/olmoe_gguf.h) on the one executor
// (exec/file_jobs.h): dense tensors a block of rows per job, each expert one job (its three
// matrices dequantized once, quantized per row, its merged_weight and .qs written at their
// offsets), so memory holds one expert per worker, not the model.
#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/version.h"
#include "exec/container_io.h"
#include "exec/file_jobs.h"
#include "exec/file_run_state.h"
#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "kernels/kernels.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/parallel/parallel_for.h"
#include "targets/container/planners.h"
#include "targets/olmoe/olmoe_gguf.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kBlockBytes = std::uint64_t{1} << 20;

struct Rows {
  std::uint64_t rows, cols, row_bytes;
};

Rows rows_of(const GgufTensor& t, std::uint64_t rows) {
  const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
  return {rows, t.dims[0], t.dims[0] / info->block * info->block_bytes};
}

// Source row of output row r when q/k rows are put back from llama.cpp's RoPE order: the
// inverse of reshape(n, 2, m).swapaxes(1, 2), i.e. reshape(n, m, 2).swapaxes(1, 2).
std::uint64_t rope_source_row(std::uint64_t r, std::uint64_t rows, std::uint64_t heads) {
  const std::uint64_t m = rows / heads / 2;
  const std::uint64_t h = r / (2 * m), a = r % (2 * m) / m, b = r % m;
  return h * 2 * m + 2 * b + a;
}

struct WorkerState {
  RawVector<std::uint8_t> raw;
  RawVector<float> f32;
  RawVector<std::uint16_t> half;
  RawVector<std::int8_t> codes;
  RawVector<float> scales;
  std::uint64_t bytes_read = 0;
};

// The plan's jobs: a dense tensor in blocks of rows (one row at a time when its rows are put
// back from RoPE order), an expert in one job that dequantizes its three matrices once and
// writes both its merged_weight and its .qs.
class GgufJobs final : public FileJobSource {
 public:
  GgufJobs(const GgufFile& f, const GgufOlmoePlan& plan)
      : f_(f), plan_(plan), state_(std::max<std::size_t>(1, thread_count())) {
    offsets_.resize(plan.files.size());
    for (std::uint32_t i = 0; i < plan.files.size(); ++i) {
      std::uint64_t off = 0;
      for (std::uint32_t k = 0; k < plan.files[i].tensors.size(); ++k) {
        const GgufOlmoeOutput& o = plan.files[i].tensors[k];
        offsets_[i].push_back(off);
        off += data_bytes(o.spec.view());
        if (!o.dense && o.scales) scales_at_[{o.layer, o.expert}] = {i, k};
      }
    }
  }

  Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) override {
    for (std::uint32_t i = 0; i < plan_.files.size(); ++i) {
      if (!write[i]) continue;
      for (std::uint32_t k = 0; k < plan_.files[i].tensors.size(); ++k) {
        const GgufOlmoeOutput& o = plan_.files[i].tensors[k];
        if (o.dense) {
          QR_TRY(dense_jobs(i, k, out));
        } else if (!o.scales) {  // the expert's job writes its .qs too
          const auto [qf, qk] = scales_at_.at({o.layer, o.expert});
          (void)qk;
          FileJob j;
          j.file = i;
          j.file2 = qf == i ? FileJob::kNone : qf;
          j.unit = k;
          out.push_back(j);
        }
      }
    }
    return ok_status();
  }

  Result<std::uint64_t> run(const FileJob& j, std::size_t worker, FileWriter& w) override {
    WorkerState& s = state_[worker];
    s.bytes_read = 0;
    const GgufOlmoeOutput& o = plan_.files[j.file].tensors[j.unit];
    QR_TRY(o.dense ? dense(j, o, s, w) : expert(j, o, s, w));
    return s.bytes_read;
  }

 private:
  Status dense_jobs(std::uint32_t i, std::uint32_t k, std::vector<FileJob>& out) {
    const GgufOlmoeOutput& o = plan_.files[i].tensors[k];
    const GgufTensor& t = *o.dense;
    const Rows r = rows_of(t, t.numel / t.dims[0]);
    if (o.permute_heads && (r.rows % o.permute_heads != 0 || r.rows / o.permute_heads % 2 != 0)) {
      return Error(ErrorKind::kUnexpectedShape,
                   fmt::format("{} rows do not split into {} heads of pairs", r.rows,
                               o.permute_heads))
          .in_tensor(t.name)
          .with_rule("olmoe_gguf.qk_permuted");
    }
    const std::uint64_t block = std::max<std::uint64_t>(1, kBlockBytes / r.row_bytes);
    for (std::uint64_t r0 = 0; r0 < r.rows; r0 += block) {
      FileJob j;
      j.file = i;
      j.unit = k;
      j.first = r0;
      j.count = std::min(block, r.rows - r0);
      out.push_back(j);
    }
    return ok_status();
  }

  Status decode(const GgufTensor& t, std::uint64_t at, std::uint64_t bytes, std::uint64_t n,
                WorkerState& s, float* out) {
    s.raw.resize(bytes);
    QR_TRY(f_.read(t, at, s.raw));
    s.bytes_read += bytes;
    if (!ggml_dequantize_row(t.ggml_type, s.raw, std::span(out, n))) {
      return Error(ErrorKind::kInternal, "block sizes disagree with the plan").in_tensor(t.name);
    }
    return ok_status();
  }

  Status dense(const FileJob& j, const GgufOlmoeOutput& o, WorkerState& s, FileWriter& w) {
    const GgufTensor& t = *o.dense;
    const Rows r = rows_of(t, t.numel / t.dims[0]);
    s.f32.resize(j.count * r.cols);
    if (o.permute_heads) {  // each row from its place in RoPE order
      for (std::uint64_t i = 0; i < j.count; ++i) {
        const std::uint64_t src = rope_source_row(j.first + i, r.rows, o.permute_heads);
        QR_TRY(decode(t, src * r.row_bytes, r.row_bytes, r.cols, s, s.f32.data() + i * r.cols));
      }
    } else {
      QR_TRY(decode(t, j.first * r.row_bytes, j.count * r.row_bytes, j.count * r.cols, s,
                    s.f32.data()));
    }
    const std::uint64_t at = offsets_[j.file][j.unit];
    if (o.spec.dtype == Dtype::kF32) {
      return w.write(j.file, at + j.first * r.cols * 4,
                     {reinterpret_cast<const std::uint8_t*>(s.f32.data()), s.f32.size() * 4});
    }
    s.half.resize(s.f32.size());
    kernels::f32_to_f16(s.f32.data(), s.f32.size(), s.half.data());
    return w.write(j.file, at + j.first * r.cols * 2,
                   {reinterpret_cast<const std::uint8_t*>(s.half.data()), s.half.size() * 2});
  }

  Status expert(const FileJob& j, const GgufOlmoeOutput& o, WorkerState& s, FileWriter& w) {
    const GgufOlmoeDims& d = plan_.dims;
    s.codes.resize(3 * d.inter * d.hidden);  // every code and scale is written below
    s.scales.resize(2 * d.inter + d.hidden);
    QuantRule rule;
    rule.bits = 8;
    std::uint64_t code_at = 0, scale_at = 0;
    for (std::size_t p = 0; p < 3; ++p) {
      const GgufTensor& t = *plan_.experts[o.layer][p];
      const Rows r = rows_of(t, p == 2 ? d.hidden : d.inter);
      const std::uint64_t slice = r.rows * r.row_bytes;
      s.f32.resize(r.rows * r.cols);
      QR_TRY(decode(t, o.expert * slice, slice, r.rows * r.cols, s, s.f32.data()));
      if (!kernels::f32_all_finite(s.f32.data(), s.f32.size())) {
        return Error(ErrorKind::kNonFiniteWeight,
                     fmt::format("expert {} decodes to a non-finite value; int8 rows need "
                                 "finite weights",
                                 o.expert))
            .in_tensor(t.name)
            .with_rule("olmoe_gguf.finite");
      }
      quantize_rows(s.f32.data(), r.rows, r.cols, rule, s.codes.data() + code_at,
                    s.scales.data() + scale_at);
      code_at += r.rows * r.cols;
      scale_at += r.rows;
    }
    QR_TRY(w.write(j.file, offsets_[j.file][j.unit],
                   {reinterpret_cast<const std::uint8_t*>(s.codes.data()), s.codes.size()}));
    const auto [qf, qk] = scales_at_.at({o.layer, o.expert});
    return w.write(qf, offsets_[qf][qk],
                   {reinterpret_cast<const std::uint8_t*>(s.scales.data()), s.scales.size() * 4});
  }

  const GgufFile& f_;
  const GgufOlmoePlan& plan_;
  std::vector<WorkerState> state_;
  std::vector<std::vector<std::uint64_t>> offsets_;  ///< per file, per tensor
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::uint32_t, std::uint32_t>>
      scales_at_;  ///< (layer, expert) -> (file, tensor) of its .qs
};

Status write_manifest(const GgufFile& f, const GgufOlmoePlan& plan,
                      const nlohmann::json& parameters, const std::string& out_dir,
                      const ContainerReport& rep) {
  nlohmann::ordered_json m;
  m["qrepack_version"] = kVersion;
  m["target"] = {{"name", "colibri-olmoe"},
                 {"runtime", "c/olmoe.c"},
                 {"reference_tool", "convert_gguf_to_olmoe.py"}};
  m["parameters"] = parameters;
  m["source"] = {{"path", f.path()},
                 {"format", "gguf"},
                 {"tensors", f.header().tensors.size()},
                 {"bytes", f.header().file_size},
                 {"model_type", "olmoe"}};
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const GgufOlmoeFile& file : plan.files) {
    files.push_back({{"name", file.name}, {"tensors", file.tensors.size()}});
  }
  for (const char* side : {"config.json", "tokenizer.json"}) {
    files.push_back({{"name", side}, {"side_file", true}});
  }
  return write_manifest_tail(m, std::move(files), rep.bytes_written, plan.sources, out_dir);
}

Status write_text(const std::string& path, const std::string& text) {
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}));
  return sink->commit();
}

nlohmann::json gguf_parameters(const GgufOlmoeOptions& o) {
  nlohmann::json p = gguf_run_parameters("colibri-olmoe", "int8-row");
  p["norm_topk_prob"] = o.norm_topk_prob;
  p["qk_permuted"] = o.qk_permuted;
  return p;
}

// Identifies the output layout: the GGUF's tensor table and every planned file's header.
std::string gguf_fingerprint(const GgufFile& f, const std::vector<SafetensorsLayout>& layouts,
                             const GgufOlmoePlan& plan) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (const GgufTensor& t : f.header().tensors) {
    const std::string line = fmt::format("{}|{}|{}|{}", t.name, t.ggml_type, t.numel, t.offset);
    XXH64_update(st, line.data(), line.size() + 1);
  }
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    XXH64_update(st, plan.files[i].name.data(), plan.files[i].name.size() + 1);
    const auto header = safetensors_header_bytes(layouts[i]);
    XXH64_update(st, header.data(), header.size());
  }
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", h);
}

}  // namespace

Result<ContainerReport> write_olmoe_gguf(const GgufFile& f, const GgufOlmoePlan& plan,
                                         const GgufOlmoeOptions& o, const std::string& out_dir,
                                         const ContainerRun& run) {
  const auto start = std::chrono::steady_clock::now();
  const nlohmann::json parameters = gguf_parameters(o);
  ContainerReport rep;
  std::vector<SafetensorsLayout> layouts;
  for (const GgufOlmoeFile& file : plan.files) {
    std::vector<TensorSpec> specs;
    for (const GgufOlmoeOutput& t : file.tensors) specs.push_back(t.spec);
    QR_ASSIGN_OR_RETURN(layout, plan_safetensors(std::move(specs), {}));
    rep.bytes_written += layout.file_size();
    rep.tensors += file.tensors.size();
    layouts.push_back(std::move(layout));
  }
  rep.files = plan.files.size();
  std::vector<std::string> names;
  for (const GgufOlmoeFile& file : plan.files) names.push_back(file.name);
  QR_ASSIGN_OR_RETURN(
      fr, start_file_run(names, layouts, out_dir, run, f.path(), source_stamp(f.paths()),
                         parameters, [&] { return gguf_fingerprint(f, layouts, plan); }));
  GgufJobs jobs(f, plan);
  QR_TRY(run_started_files(fr, output_files(names, layouts), out_dir, run.shard != nullptr, jobs,
                           rep));
  if (rep.already_complete) return rep;
  if (run.shard) {  // merge writes the rest
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return rep;
  }
  QR_TRY(write_text((fs::path(out_dir) / "config.json").string(), plan.config_json));
  QR_TRY(write_text((fs::path(out_dir) / "tokenizer.json").string(), plan.tokenizer_json));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  QR_TRY(write_manifest(f, plan, parameters, out_dir, rep));
  if (fr.state) fr.state->remove();
  return rep;
}

}  // namespace qrepack
