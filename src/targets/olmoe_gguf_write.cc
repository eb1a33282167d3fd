// colibri-olmoe from GGUF: writing a plan (src/targets/olmoe_gguf.h). Each output tensor is
// produced in file order and streamed into its safetensors file: dense tensors a block of rows
// at a time, experts one expert at a time (its three matrices dequantized, then quantized
// per row), so memory holds one expert, not the model.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/version.h"
#include "exec/container_io.h"
#include "io/json_file.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/byte_sink.h"
#include "targets/olmoe_gguf.h"

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

class Producer {
 public:
  Producer(const GgufFile& f, SafetensorsWriter& w, ContainerReport& rep)
      : f_(f), w_(w), rep_(rep) {}

  Status dense(const GgufOlmoeOutput& o) {
    const GgufTensor& t = *o.dense;
    const Rows r = rows_of(t, t.numel / t.dims[0]);
    if (o.permute_heads && (r.rows % o.permute_heads != 0 || r.rows / o.permute_heads % 2 != 0)) {
      return Error(ErrorKind::kUnexpectedShape,
                   fmt::format("{} rows do not split into {} heads of pairs", r.rows,
                               o.permute_heads))
          .in_tensor(t.name)
          .with_rule("olmoe_gguf.qk_permuted");
    }
    const std::uint64_t block =
        o.permute_heads ? 1 : std::max<std::uint64_t>(1, kBlockBytes / r.row_bytes);
    QR_TRY(w_.begin_tensor(o.spec.name));
    for (std::uint64_t r0 = 0; r0 < r.rows; r0 += block) {
      const std::uint64_t n = std::min(block, r.rows - r0);
      const std::uint64_t src = o.permute_heads ? rope_source_row(r0, r.rows, o.permute_heads) : r0;
      QR_TRY(decode(t, src * r.row_bytes, n * r.row_bytes, n * r.cols));
      QR_TRY(store(o.spec.dtype));
    }
    return ok_status();
  }

  // One expert's merged_weight or qs; both come from one quantization, kept for the other.
  Status expert(const GgufOlmoeOutput& o, const GgufOlmoePlan& plan) {
    if (!cached_ || cached_layer_ != o.layer || cached_expert_ != o.expert) {
      QR_TRY(quantize_expert(plan, o.layer, o.expert));
    }
    QR_TRY(w_.begin_tensor(o.spec.name));
    if (o.scales) {
      return w_.append({reinterpret_cast<const std::uint8_t*>(scales_.data()), scales_.size() * 4});
    }
    return w_.append({reinterpret_cast<const std::uint8_t*>(codes_.data()), codes_.size()});
  }

 private:
  Status decode(const GgufTensor& t, std::uint64_t at, std::uint64_t bytes, std::uint64_t n) {
    raw_.resize(bytes);
    QR_TRY(f_.read(t, at, raw_));
    rep_.bytes_read += bytes;
    f32_.resize(n);
    if (!ggml_dequantize_row(t.ggml_type, raw_, f32_)) {
      return Error(ErrorKind::kInternal, "block sizes disagree with the plan").in_tensor(t.name);
    }
    return ok_status();
  }

  Status store(Dtype d) {
    if (d == Dtype::kF32) {
      return w_.append({reinterpret_cast<const std::uint8_t*>(f32_.data()), f32_.size() * 4});
    }
    half_.resize(f32_.size());
    f16_encode_span(f32_, half_);
    return w_.append({reinterpret_cast<const std::uint8_t*>(half_.data()), half_.size() * 2});
  }

  Status quantize_expert(const GgufOlmoePlan& plan, std::uint64_t l, std::uint64_t e) {
    const GgufOlmoeDims& d = plan.dims;
    codes_.assign(3 * d.inter * d.hidden, 0);
    scales_.assign(2 * d.inter + d.hidden, 0.0f);
    QuantRule rule;
    rule.bits = 8;
    std::uint64_t code_at = 0, scale_at = 0;
    for (std::size_t p = 0; p < 3; ++p) {
      const GgufTensor& t = *plan.experts[l][p];
      const Rows r = rows_of(t, p == 2 ? d.hidden : d.inter);
      const std::uint64_t slice = r.rows * r.row_bytes;
      QR_TRY(decode(t, e * slice, slice, r.rows * r.cols));
      for (const float x : f32_) {
        if (!std::isfinite(x)) {
          return Error(ErrorKind::kNonFiniteWeight,
                       fmt::format("expert {} decodes to a non-finite value; int8 rows need "
                                   "finite weights",
                                   e))
              .in_tensor(t.name)
              .with_rule("olmoe_gguf.finite");
        }
      }
      quantize_rows(f32_.data(), r.rows, r.cols, rule, codes_.data() + code_at,
                    scales_.data() + scale_at);
      code_at += r.rows * r.cols;
      scale_at += r.rows;
    }
    cached_ = true;
    cached_layer_ = l;
    cached_expert_ = e;
    return ok_status();
  }

  const GgufFile& f_;
  SafetensorsWriter& w_;
  ContainerReport& rep_;
  std::vector<std::uint8_t> raw_;
  std::vector<float> f32_;
  std::vector<std::uint16_t> half_;
  std::vector<std::int8_t> codes_;
  std::vector<float> scales_;
  bool cached_ = false;
  std::uint64_t cached_layer_ = 0, cached_expert_ = 0;
};

Status write_file(const GgufFile& f, const GgufOlmoePlan& plan, const GgufOlmoeFile& file,
                  const std::string& out_dir, ContainerReport& rep) {
  std::vector<TensorSpec> specs;
  for (const GgufOlmoeOutput& o : file.tensors) specs.push_back(o.spec);
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors(std::move(specs), {}));
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create((fs::path(out_dir) / file.name).string()));
  SafetensorsWriter w(layout, *sink);
  Producer p(f, w, rep);
  for (const GgufOlmoeOutput& o : file.tensors) {
    QR_TRY(o.dense ? p.dense(o) : p.expert(o, plan));
  }
  QR_TRY(w.finish());
  rep.bytes_written += layout.file_size();
  rep.tensors += file.tensors.size();
  ++rep.files;
  return ok_status();
}

Status write_manifest(const GgufFile& f, const GgufOlmoePlan& plan, const GgufOlmoeOptions& o,
                      const std::string& out_dir, const ContainerReport& rep) {
  nlohmann::ordered_json m;
  m["qrepack_version"] = kVersion;
  m["target"] = {{"name", "colibri-olmoe"},
                 {"runtime", "c/olmoe.c"},
                 {"reference_tool", "convert_gguf_to_olmoe.py"}};
  m["parameters"] = {{"target", "colibri-olmoe"},
                     {"to", "int8-row"},
                     {"norm_topk_prob", o.norm_topk_prob},
                     {"qk_permuted", o.qk_permuted}};
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
  m["files"] = std::move(files);
  m["bytes_written"] = rep.bytes_written;
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const ContainerSource& s : plan.sources) {
    sources.push_back({{"name", s.name}, {"disposition", s.disposition}, {"rule", s.rule}});
  }
  m["sources"] = std::move(sources);
  return write_json_file((fs::path(out_dir) / "qrepack.json").string(), m);
}

Status write_text(const std::string& path, const std::string& text) {
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}));
  return sink->commit();
}

}  // namespace

Result<ContainerReport> write_olmoe_gguf(const GgufFile& f, const GgufOlmoePlan& plan,
                                         const GgufOlmoeOptions& o, const std::string& out_dir) {
  const auto start = std::chrono::steady_clock::now();
  ContainerReport rep;
  QR_TRY(write_text((fs::path(out_dir) / "config.json").string(), plan.config_json));
  QR_TRY(write_text((fs::path(out_dir) / "tokenizer.json").string(), plan.tokenizer_json));
  for (const GgufOlmoeFile& file : plan.files) QR_TRY(write_file(f, plan, file, out_dir, rep));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  QR_TRY(write_manifest(f, plan, o, out_dir, rep));
  return rep;
}

}  // namespace qrepack
