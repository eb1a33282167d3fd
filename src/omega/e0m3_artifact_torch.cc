// write_e0m3_torch: the artifact as the .pt dict FlashRT's loader reads.
#include <fmt/format.h>

#include <cstring>

#include "core/check.h"
#include "omega/e0m3_artifact.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt_writer.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"

namespace qrepack {
namespace {

// Read values -> writable values; a float cannot be written loadably for torch 1.13.
Result<PtOutPtr> to_out(const TorchFile& f, const PtValue& v, const std::string& where) {
  if (std::holds_alternative<PtValue::None>(v.v)) return pt_none();
  if (const auto* b = std::get_if<bool>(&v.v)) return pt_bool(*b);
  if (const auto* i = std::get_if<std::int64_t>(&v.v)) return pt_int(*i);
  if (const auto* s = std::get_if<std::string>(&v.v)) return pt_str(*s);
  if (const auto* t = std::get_if<PtTensor>(&v.v)) {  // read when the file reaches it
    return pt_tensor_deferred(t->dtype, t->shape, [&f, t](ByteSink& sink) -> Status {
      QR_ASSIGN_OR_RETURN(bytes, read_bytes(f, *t));
      return sink.write(bytes);
    });
  }
  if (const auto* l = std::get_if<PtList>(&v.v)) {
    PtOut::List out;
    for (const auto& x : *l) {
      QR_ASSIGN_OR_RETURN(o, to_out(f, *x, where));
      out.push_back(o);
    }
    return pt_list(std::move(out));
  }
  if (const auto* t = std::get_if<PtValue::Tuple>(&v.v)) {
    PtOut::List out;
    for (const auto& x : t->items) {
      QR_ASSIGN_OR_RETURN(o, to_out(f, *x, where));
      out.push_back(o);
    }
    return pt_list(std::move(out));
  }
  if (const auto* d = std::get_if<PtDict>(&v.v)) {
    PtOut::Dict out;
    for (const auto& [k, x] : *d) {
      if (!k->is_string()) return Error(ErrorKind::kInvalidRecord, where + " has a non-string key");
      QR_ASSIGN_OR_RETURN(o, to_out(f, *x, where));
      out.emplace_back(std::get<std::string>(k->v), o);
    }
    return pt_dict(std::move(out));
  }
  return Error(ErrorKind::kInvalidRecord,
               fmt::format("{} holds a float, which torch 1.13's weights_only loader rejects; "
                           "the artifact cannot carry it",
                           where));
}

template <typename T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

PtOutPtr i64(std::uint64_t v) { return pt_int(static_cast<std::int64_t>(v)); }

}  // namespace

Status write_e0m3_torch(const E0m3Artifact& a, const E0m3Workspace& ws, const std::string& path,
                        const std::function<Status(std::size_t, ByteSink&)>& produce) {
  const TorchFile& pack = *a.pack;
  PtOut::Dict weights, aux;
  PtOut::List layers;
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const E0m3Layer& l = a.layers[i];
    const auto sfb = [&ws, i](ByteSink& s) {
      QR_CHECK(ws.layer == i, "write_e0m3_torch: sfb before its layer's packed");
      return s.write(ws.sfb);
    };
    const auto fp16 = [&ws, i](ByteSink& s) {
      QR_CHECK(ws.layer == i, "write_e0m3_torch: fp16 before its layer's packed");
      return s.write(
          std::span(reinterpret_cast<const std::uint8_t*>(ws.fp16.data()), ws.fp16.size() * 2));
    };
    // packed comes first in the file: producing layer i there writes it and fills ws for
    // the other two.
    const auto packed = [&produce, i](ByteSink& s) { return produce(i, s); };
    PtOut::Dict wd = {{"packed", pt_tensor_deferred(Dtype::kU8, {l.n, l.k / 2}, packed)},
                      {"sfb", pt_tensor_deferred(Dtype::kU8, {sf_sm1xx_size(l.n, l.k)}, sfb)},
                      {"N", i64(l.n)},
                      {"K", i64(l.k)}};
    if (a.keep_fp16) {
      wd.emplace_back("weight_fp16_folded", pt_tensor_deferred(Dtype::kF16, {l.n, l.k}, fp16));
    }
    weights.emplace_back(l.name, pt_dict(std::move(wd)));
    PtOut::Dict ad;
    for (const char* f : kE0m3AuxFields) {
      const PtValue* v = l.record->get(f);
      if (!v) continue;
      QR_ASSIGN_OR_RETURN(ov, to_out(pack, *v, fmt::format("record '{}' field '{}'", l.name, f)));
      ad.emplace_back(f, ov);
    }
    ad.emplace_back("fold", pt_str(a.fold));
    if (!l.act_scale_static.empty()) {  // fold actnorm
      ad.emplace_back("act_scale_static",
                      pt_tensor(Dtype::kF32, {l.k}, bytes_of(l.act_scale_static)));
      // c as FlashRT writes it (a Python float: its checker requires one), or for torch 1.13's
      // weights_only loader, which has no float opcode, a 0-d f32 tensor of the same value.
      ad.emplace_back(
          "act_out_scale",
          a.act_out_scale_tensor
              ? pt_tensor(Dtype::kF32, {}, bytes_of(std::vector<float>{l.act_out_scale}))
              : pt_float(static_cast<double>(l.act_out_scale)));
    }
    aux.emplace_back(l.name, pt_dict(std::move(ad)));
    layers.push_back(pt_str(l.name));
  }
  // weights, aux and selected_layers cover the same set by construction; assert it anyway.
  if (weights.size() != aux.size() || aux.size() != layers.size()) {
    return Error(ErrorKind::kVerificationFailed, "artifact coverage mismatch").in_file(path);
  }
  PtOutPtr meta = pt_dict({});
  if (const PtValue* m = pack.root().get("__meta__")) {
    QR_ASSIGN_OR_RETURN(mo, to_out(pack, *m, "__meta__"));
    meta = mo;
  }
  const auto artifact = pt_dict({{"format", pt_str("omega_e0m3_v1")},
                                 {"schema_version", pt_int(1)},
                                 {"source_pack_meta", meta},
                                 {"source_record_count", i64(a.source_record_count)},
                                 {"selected_record_count", i64(layers.size())},
                                 {"selected_layers", pt_list(std::move(layers))},
                                 {"fold", pt_str(a.fold)},
                                 {"weights", pt_dict(std::move(weights))},
                                 {"aux", pt_dict(std::move(aux))}});
  return write_torch_file(path, artifact);
}

}  // namespace qrepack
