#include "qrepack/omega/e0m3_convert.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "qrepack/formats/float16.h"
#include "qrepack/io/torch_pt_writer.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {
namespace {

// Read values -> writable values; a float cannot be written loadably for torch 1.13.
Result<PtOutPtr> to_out(const TorchFile& f, const PtValue& v, const std::string& where) {
  if (std::holds_alternative<PtValue::None>(v.v)) return pt_none();
  if (const auto* b = std::get_if<bool>(&v.v)) return pt_bool(*b);
  if (const auto* i = std::get_if<std::int64_t>(&v.v)) return pt_int(*i);
  if (const auto* s = std::get_if<std::string>(&v.v)) return pt_str(*s);
  if (const auto* t = std::get_if<PtTensor>(&v.v)) {
    QR_ASSIGN_OR_RETURN(bytes, read_bytes(f, *t));
    return pt_tensor(t->dtype, t->shape, std::move(bytes));
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

}  // namespace

void e0m3_fold_mean(std::span<std::uint16_t> w, std::span<const float> table, std::uint64_t n,
                    std::uint64_t k, std::uint64_t steps) {
  std::vector<float> mean(k);
  for (std::uint64_t c = 0; c < k; ++c) {
    float s = 0.0f;
    for (std::uint64_t t = 0; t < steps; ++t) s += table[t * k + c];
    mean[c] = f16_decode(f16_encode(s / static_cast<float>(steps)));
  }
  // An fp16 x fp16 product is exact in f32, so one rounding gives the fp16 multiply.
  for (std::uint64_t r = 0; r < n; ++r) {
    for (std::uint64_t c = 0; c < k; ++c) {
      auto& x = w[r * k + c];
      x = f16_encode(f16_decode(x) * mean[c]);
    }
  }
}

Result<E0m3ConvertReport> convert_pack_e0m3(const TorchFile& pack, const PackValidation& val,
                                            const E0m3ConvertOptions& o, const std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  E0m3ConvertReport rep;
  const PtValue& root = pack.root();
  const char* fold = o.fold == E0m3Fold::kNone ? "none" : "mean";
  PtOut::Dict weights, aux;
  PtOut::List layers;
  for (const std::string& name : val.records) {
    const PtValue& rec = *root.get(name);
    const auto& w = std::get<PtTensor>(rec.get("weight_res_q")->v);
    const std::uint64_t n = w.shape[0], k = w.shape[1];
    QR_ASSIGN_OR_RETURN(h, read_fp16(pack, w));
    const auto& table = std::get<PtTensor>(rec.get("act_scale_table")->v);
    if (o.fold == E0m3Fold::kMean) {
      QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
      e0m3_fold_mean(h, tab, n, k, table.shape[0]);
    }
    std::vector<std::uint8_t> packed(n * k / 2), sfb(sf_sm1xx_size(n, k));
    auto st = e0m3_quantize(h, n, k, packed, sfb);
    if (!st.ok()) return std::move(st.error().in_file(pack.path()).in_tensor(name));
    const std::uint64_t sfb_size = sfb.size();  // before the move below
    PtOut::Dict wd = {{"packed", pt_tensor(Dtype::kU8, {n, k / 2}, std::move(packed))},
                      {"sfb", pt_tensor(Dtype::kU8, {sfb_size}, std::move(sfb))},
                      {"N", pt_int(static_cast<std::int64_t>(n))},
                      {"K", pt_int(static_cast<std::int64_t>(k))}};
    if (o.keep_fp16) {
      std::vector<std::uint8_t> b(h.size() * 2);
      std::memcpy(b.data(), h.data(), b.size());
      wd.emplace_back("weight_fp16_folded", pt_tensor(Dtype::kF16, {n, k}, std::move(b)));
    }
    weights.emplace_back(name, pt_dict(std::move(wd)));
    PtOut::Dict ad;
    for (const char* f :
         {"duquant_rotation_blocks", "duquant_rotation_perm", "duquant_rotation_out_blocks",
          "act_scale_table", "weight_bits", "a_bits", "in_features", "out_features", "rank"}) {
      const PtValue* v = rec.get(f);
      if (!v) continue;
      QR_ASSIGN_OR_RETURN(ov, to_out(pack, *v, fmt::format("record '{}' field '{}'", name, f)));
      ad.emplace_back(f, ov);
    }
    ad.emplace_back("fold", pt_str(fold));
    aux.emplace_back(name, pt_dict(std::move(ad)));
    layers.push_back(pt_str(name));
    rep.fp16_bytes += n * k * 2;
    ++rep.records;
  }
  // weights, aux and selected_layers cover the same set by construction; assert it anyway.
  if (weights.size() != aux.size() || aux.size() != layers.size()) {
    return Error(ErrorKind::kVerificationFailed, "artifact coverage mismatch").in_file(out);
  }
  std::size_t source_count = 0;
  for (const auto& [k, v] : std::get<PtDict>(root.v)) {
    source_count += !(k->is_string() && std::get<std::string>(k->v) == "__meta__");
  }
  PtOutPtr meta = pt_dict({});
  if (const PtValue* m = root.get("__meta__")) {
    QR_ASSIGN_OR_RETURN(mo, to_out(pack, *m, "__meta__"));
    meta = mo;
  }
  const auto artifact =
      pt_dict({{"format", pt_str("omega_e0m3_v1")},
               {"schema_version", pt_int(1)},
               {"source_pack_meta", meta},
               {"source_record_count", pt_int(static_cast<std::int64_t>(source_count))},
               {"selected_record_count", pt_int(static_cast<std::int64_t>(rep.records))},
               {"selected_layers", pt_list(std::move(layers))},
               {"fold", pt_str(fold)},
               {"weights", pt_dict(std::move(weights))},
               {"aux", pt_dict(std::move(aux))}});
  QR_TRY(write_torch_file(out, artifact));
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
