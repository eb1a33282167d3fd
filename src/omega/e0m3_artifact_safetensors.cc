// write_e0m3_safetensors: the artifact as one safetensors file. Tensors: <layer>.packed (U8
// [N, K/2]), <layer>.sfb (U8 [sf_sm1xx_size]), <layer>.weight_fp16_folded (F16, --keep-fp16)
// and <layer>.<aux tensor> in the pack's dtype. __metadata__ (strings): format,
// schema_version, fold, source_record_count, selected_record_count, and as JSON text
// selected_layers, source_pack_meta and aux ({layer: {scalar aux fields, fold, N, K}}).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "omega/e0m3_artifact.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors_writer.h"
#include "qrepack/io/torch_values.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;

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

}  // namespace

Status write_e0m3_safetensors(const E0m3Artifact& a, const std::string& path) {
  const TorchFile& pack = *a.pack;
  std::vector<TensorSpec> specs;
  std::map<std::string, std::span<const std::uint8_t>> data;
  std::vector<std::vector<std::uint8_t>> aux_bytes;  // owns the copied aux tensors
  aux_bytes.reserve(a.layers.size() * std::size(kE0m3AuxFields));
  Json layers = Json::array(), aux = Json::object();
  for (const E0m3Layer& l : a.layers) {
    const auto add = [&](const std::string& field, Dtype d, std::vector<std::uint64_t> shape,
                         std::span<const std::uint8_t> bytes) {
      specs.push_back({l.name + "." + field, d, std::move(shape)});
      data[l.name + "." + field] = bytes;
    };
    add("packed", Dtype::kU8, {l.n, l.k / 2}, l.packed);
    add("sfb", Dtype::kU8, {l.sfb.size()}, l.sfb);
    if (!l.fp16.empty()) {
      add("weight_fp16_folded", Dtype::kF16, {l.n, l.k},
          std::span(reinterpret_cast<const std::uint8_t*>(l.fp16.data()), l.fp16.size() * 2));
    }
    Json scalars = Json::object();
    for (const char* f : kE0m3AuxFields) {
      const PtValue* v = l.record->get(f);
      if (!v) continue;
      if (const auto* t = std::get_if<PtTensor>(&v->v)) {
        QR_ASSIGN_OR_RETURN(b, read_bytes(pack, *t));
        aux_bytes.push_back(std::move(b));
        add(f, t->dtype, t->shape, aux_bytes.back());
      } else {
        QR_ASSIGN_OR_RETURN(j, to_json(*v, fmt::format("record '{}' field '{}'", l.name, f)));
        scalars[f] = std::move(j);
      }
    }
    scalars["fold"] = a.fold;
    if (!l.act_scale_static.empty()) {  // fold actnorm
      add("act_scale_static", Dtype::kF32, {l.k},
          std::span(reinterpret_cast<const std::uint8_t*>(l.act_scale_static.data()),
                    l.act_scale_static.size() * 4));
      add("act_out_scale", Dtype::kF32, {},  // a 0-d tensor, as in the .pt
          std::span(reinterpret_cast<const std::uint8_t*>(&l.act_out_scale), 4));
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
  const std::map<std::string, std::string> metadata = {
      {"format", "omega_e0m3_v1"},
      {"schema_version", "1"},
      {"fold", a.fold},
      {"source_record_count", std::to_string(a.source_record_count)},
      {"selected_record_count", std::to_string(a.layers.size())},
      {"selected_layers", layers.dump()},
      {"source_pack_meta", meta.dump()},
      {"aux", aux.dump()},
  };
  sort_for_alignment(specs);
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors(std::move(specs), metadata));
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  SafetensorsWriter w(layout, *sink);
  for (const TensorView& t : layout.tensors)
    QR_TRY(w.write_tensor(t.name, data.at(std::string(t.name))));
  return w.finish();
}

}  // namespace qrepack
