// write_e0m3_safetensors: the artifact as one safetensors file. Tensors: <layer>.packed (U8
// [N, K/2]), <layer>.sfb (U8 [sf_sm1xx_size]), <layer>.weight_fp16_folded (F16, --keep-fp16)
// and <layer>.<aux tensor> in the pack's dtype. __metadata__ (strings): format,
// schema_version, fold, source_record_count, selected_record_count, and as JSON text
// selected_layers, source_pack_meta and aux ({layer: {scalar aux fields, fold, N, K}}).
// The file is planned whole first (every tensor's offset), then written on the one executor
// (exec/file_jobs.h): per layer, bands of 128-row tiles (about kBandBytes of fp16 each; a
// band's scales are one contiguous run of the SFB, whose 512-byte atoms go K-tile fastest)
// and one job for its aux tensors, on every worker, so memory holds a band per worker, not
// the artifact. A weight that is not contiguous fp16 is converted whole in one job.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "exec/file_jobs.h"
#include "omega/e0m3_artifact.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors_writer.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::uint64_t kBandBytes = 512 << 10;
constexpr std::uint64_t kTileRows = 128;

// A scalar / container value as JSON; tensors and non-finite floats cannot be carried.
Result<Json> to_json(const PtValue& v, const std::string& where) {
  if (std::holds_alternative<PtValue::None>(v.v)) return Json(nullptr);
  if (const auto* b = std::get_if<bool>(&v.v)) return Json(*b);
  if (const auto* i = std::get_if<std::int64_t>(&v.v)) return Json(*i);
  if (const auto* s = std::get_if<std::string>(&v.v)) return Json(*s);
  if (const auto* d = std::get_if<double>(&v.v)) {
    if (!std::isfinite(*d)) {
      return Error(ErrorKind::kInvalidRecord,
                   where + " holds a non-finite float, which JSON metadata cannot carry");
    }
    return Json(*d);
  }
  const auto items = [&](const PtList& l) -> Result<Json> {
    Json a = Json::array();
    for (const auto& x : l) {
      QR_ASSIGN_OR_RETURN(j, to_json(*x, where));
      a.push_back(std::move(j));
    }
    return a;
  };
  if (const auto* l = std::get_if<PtList>(&v.v)) return items(*l);
  if (const auto* t = std::get_if<PtValue::Tuple>(&v.v)) return items(t->items);
  if (const auto* d = std::get_if<PtDict>(&v.v)) {
    Json o = Json::object();
    for (const auto& [k, x] : *d) {
      if (!k->is_string()) return Error(ErrorKind::kInvalidRecord, where + " has a non-string key");
      QR_ASSIGN_OR_RETURN(j, to_json(*x, where));
      o[std::get<std::string>(k->v)] = std::move(j);
    }
    return o;
  }
  return Error(ErrorKind::kInvalidRecord,
               where + " holds a tensor, which safetensors __metadata__ cannot carry");
}

// Where one layer's tensors go (offsets in the data section).
struct LayerOffsets {
  std::uint64_t packed = 0, sfb = 0, fp16 = 0;
  std::vector<std::pair<const PtTensor*, std::uint64_t>> aux;  ///< copied pack tensors
  std::uint64_t act_static = 0, act_out = 0;                   ///< fold actnorm
};

// The header's content: every tensor and the metadata, as the artifact defines them.
struct E0m3Plan {
  std::vector<TensorSpec> specs;
  std::map<std::string, std::string> metadata;
};

Result<E0m3Plan> plan_tensors(const E0m3Artifact& a) {
  const TorchFile& pack = *a.pack;
  E0m3Plan p;
  Json layers = Json::array(), aux = Json::object();
  for (const E0m3Layer& l : a.layers) {
    const auto add = [&](const std::string& field, Dtype d, std::vector<std::uint64_t> shape) {
      p.specs.push_back({l.name + "." + field, d, std::move(shape)});
    };
    add("packed", Dtype::kU8, {l.n, l.k / 2});
    add("sfb", Dtype::kU8, {sf_sm1xx_size(l.n, l.k)});
    if (a.keep_fp16) add("weight_fp16_folded", Dtype::kF16, {l.n, l.k});
    Json scalars = Json::object();
    for (const char* f : kE0m3AuxFields) {
      const PtValue* v = l.record->get(f);
      if (!v) continue;
      if (const auto* t = std::get_if<PtTensor>(&v->v)) {
        add(f, t->dtype, t->shape);
      } else {
        QR_ASSIGN_OR_RETURN(j, to_json(*v, fmt::format("record '{}' field '{}'", l.name, f)));
        scalars[f] = std::move(j);
      }
    }
    scalars["fold"] = a.fold;
    if (!l.act_scale_static.empty()) {  // fold actnorm
      add("act_scale_static", Dtype::kF32, {l.k});
      add("act_out_scale", Dtype::kF32, {});  // a 0-d tensor, as in the .pt
    }
    scalars["N"] = l.n;
    scalars["K"] = l.k;
    aux[l.name] = std::move(scalars);
    layers.push_back(l.name);
  }
  Json meta = Json::object();
  if (const PtValue* m = pack.root().get("__meta__")) {
    QR_ASSIGN_OR_RETURN(j, to_json(*m, "__meta__"));
    meta = std::move(j);
  }
  p.metadata = {
      {"format", "omega_e0m3_v1"},
      {"schema_version", "1"},
      {"fold", a.fold},
      {"source_record_count", std::to_string(a.source_record_count)},
      {"selected_record_count", std::to_string(a.layers.size())},
      {"selected_layers", layers.dump()},
      {"source_pack_meta", meta.dump()},
      {"aux", aux.dump()},
  };
  sort_for_alignment(p.specs);
  return p;
}

// Each layer's offsets, from the planned order.
std::vector<LayerOffsets> offsets_of(const E0m3Artifact& a, const SafetensorsLayout& layout) {
  std::map<std::string_view, std::uint64_t> at;
  std::uint64_t off = 0;
  for (const TensorView& t : layout.tensors) {
    at[t.name] = off;
    off += data_bytes(t);
  }
  std::vector<LayerOffsets> out;
  for (const E0m3Layer& l : a.layers) {
    const auto of = [&](const char* field) { return at.at(l.name + "." + field); };
    LayerOffsets o;
    o.packed = of("packed");
    o.sfb = of("sfb");
    if (a.keep_fp16) o.fp16 = of("weight_fp16_folded");
    for (const char* f : kE0m3AuxFields) {
      const PtValue* v = l.record->get(f);
      if (const auto* t = v ? std::get_if<PtTensor>(&v->v) : nullptr) o.aux.emplace_back(t, of(f));
    }
    if (!l.act_scale_static.empty()) {
      o.act_static = of("act_scale_static");
      o.act_out = of("act_out_scale");
    }
    out.push_back(std::move(o));
  }
  return out;
}

struct BandBuffers {
  RawVector<std::uint16_t> fp16;
  RawVector<std::uint8_t> packed;
  std::vector<std::uint8_t> sfb;  ///< zeroed per band: its padding must be zero
};

// Jobs: part 0 a band of rows [first, first + count) of layer `unit`, part 1 its aux tensors.
class E0m3Jobs final : public FileJobSource {
 public:
  E0m3Jobs(const E0m3Artifact& a, std::span<const std::vector<float>> factors,
           std::vector<LayerOffsets> offsets)
      : a_(a),
        factors_(factors),
        offsets_(std::move(offsets)),
        buffers_(std::max<std::size_t>(1, thread_count())) {}

  Status make_jobs(const std::vector<bool>& write, std::vector<FileJob>& out) override {
    if (write.empty() || !write[0]) return ok_status();
    for (std::uint32_t i = 0; i < a_.layers.size(); ++i) {
      const E0m3Layer& l = a_.layers[i];
      out.push_back({0, FileJob::kNone, i, 1, 0, 0, false});
      if (l.n == 0 || l.k == 0) continue;
      const std::uint64_t band = whole_read(l) ? round_up(l.n) : band_rows(l);
      for (std::uint64_t r0 = 0; r0 < l.n; r0 += band) {
        out.push_back({0, FileJob::kNone, i, 0, r0, std::min(band, l.n - r0), false});
      }
    }
    return ok_status();
  }

  Result<std::uint64_t> run(const FileJob& j, std::size_t worker, FileWriter& w) override {
    if (j.part == 1) {
      QR_TRY(write_aux(j.unit, w));
      return std::uint64_t{0};
    }
    QR_TRY(write_band(j, buffers_[worker], w));
    return j.count * a_.layers[j.unit].k * 2;
  }

 private:
  static std::uint64_t round_up(std::uint64_t n) {
    return (n + kTileRows - 1) / kTileRows * kTileRows;
  }
  static std::uint64_t band_rows(const E0m3Layer& l) {
    return std::max<std::uint64_t>(1, kBandBytes / (kTileRows * l.k * 2)) * kTileRows;
  }
  static const PtTensor& weight(const E0m3Layer& l) {
    return std::get<PtTensor>(l.record->get("weight_res_q")->v);
  }
  static bool whole_read(const E0m3Layer& l) {
    const PtTensor& t = weight(l);
    return !(t.dtype == Dtype::kF16 && t.contiguous());
  }

  Status read_band(const E0m3Layer& l, const FileJob& j, RawVector<std::uint16_t>& fp16) {
    const TorchFile& pack = *a_.pack;
    const std::uint64_t count = j.count * l.k;
    if (whole_read(l)) {  // the one job of this layer: converted whole
      QR_ASSIGN_OR_RETURN(h, read_fp16(pack, weight(l)));
      fp16.assign(h.begin(), h.end());
      return ok_status();
    }
    fp16.resize(count);
    return pack.read_elements(weight(l), j.first * l.k, count,
                              std::span(reinterpret_cast<std::uint8_t*>(fp16.data()), count * 2));
  }

  Status write_band(const FileJob& j, BandBuffers& b, FileWriter& w) {
    const E0m3Layer& l = a_.layers[j.unit];
    const LayerOffsets& o = offsets_[j.unit];
    QR_TRY(read_band(l, j, b.fp16));
    if (!factors_[j.unit].empty()) e0m3_fold_rows(b.fp16, factors_[j.unit], j.count, l.k);
    b.packed.resize(j.count * l.k / 2);
    b.sfb.assign(sf_sm1xx_size(j.count, l.k), 0);
    e0m3_quantize_rows(b.fp16, b.packed, 0, l.k, b.sfb, j.count);
    // Rows [first, first + count) start a 128-row tile: their scales are the SFB's bytes from
    // that tile's atoms on.
    const std::uint64_t k_atoms = (l.k / 16 + 3) / 4;
    QR_TRY(w.write(0, o.packed + j.first * l.k / 2, b.packed));
    QR_TRY(w.write(0, o.sfb + j.first / kTileRows * k_atoms * 512, b.sfb));
    if (!a_.keep_fp16) return ok_status();
    return w.write(
        0, o.fp16 + j.first * l.k * 2,
        std::span(reinterpret_cast<const std::uint8_t*>(b.fp16.data()), b.fp16.size() * 2));
  }

  Status write_aux(std::uint32_t i, FileWriter& w) {
    const E0m3Layer& l = a_.layers[i];
    const LayerOffsets& o = offsets_[i];
    for (const auto& [t, at] : o.aux) {
      QR_ASSIGN_OR_RETURN(bytes, read_bytes(*a_.pack, *t));
      QR_TRY(w.write(0, at, bytes));
    }
    if (l.act_scale_static.empty()) return ok_status();
    QR_TRY(w.write(0, o.act_static,
                   std::span(reinterpret_cast<const std::uint8_t*>(l.act_scale_static.data()),
                             l.act_scale_static.size() * 4)));
    return w.write(0, o.act_out,
                   std::span(reinterpret_cast<const std::uint8_t*>(&l.act_out_scale), 4));
  }

  const E0m3Artifact& a_;
  std::span<const std::vector<float>> factors_;
  std::vector<LayerOffsets> offsets_;
  std::vector<BandBuffers> buffers_;
};

}  // namespace

Status write_e0m3_safetensors(const E0m3Artifact& a, std::span<const std::vector<float>> factors,
                              const std::string& path,
                              const std::function<void(std::uint64_t)>& on_progress) {
  QR_ASSIGN_OR_RETURN(plan, plan_tensors(a));
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors(std::move(plan.specs), plan.metadata));
  E0m3Jobs jobs(a, factors, offsets_of(a, layout));
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  const OutputFile file{name, &layout};
  FileJobsConfig config = fault_hooks_from_env();
  config.on_progress = on_progress;
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  QR_ASSIGN_OR_RETURN(read, run_file_jobs(std::span(&file, 1), {true}, dir, jobs, config,
                                          [](std::size_t) { return ok_status(); }));
  (void)read;
  return ok_status();
}

}  // namespace qrepack
