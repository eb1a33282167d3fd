#include "qrepack/omega/e0m3_convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "omega/e0m3_artifact.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {

const char* e0m3_fold_name(E0m3Fold f) {
  switch (f) {
    case E0m3Fold::kMean:
      return "mean";
    case E0m3Fold::kActnorm:
      return "actnorm";
    case E0m3Fold::kNone:
      break;
  }
  return "none";
}

namespace {

// table.mean(0) for column c: an f32 sum over the steps in order, divided by T.
float step_mean(std::span<const float> table, std::uint64_t k, std::uint64_t steps,
                std::uint64_t c) {
  float s = 0.0f;
  for (std::uint64_t t = 0; t < steps; ++t) s += table[t * k + c];
  return s / static_cast<float>(steps);
}

// W[:, c] = fp16(W[:, c] * r[c]) for fp16 factors r: an fp16 x fp16 product is exact in f32,
// so one rounding gives torch's fp16 multiply.
void fold_columns(std::span<std::uint16_t> w, const std::vector<float>& r, std::uint64_t n,
                  std::uint64_t k) {
  for (std::uint64_t row = 0; row < n; ++row) {
    for (std::uint64_t c = 0; c < k; ++c) {
      auto& x = w[row * k + c];
      x = f16_encode(f16_decode(x) * r[c]);
    }
  }
}

}  // namespace

void e0m3_fold_mean(std::span<std::uint16_t> w, std::span<const float> table, std::uint64_t n,
                    std::uint64_t k, std::uint64_t steps) {
  std::vector<float> mean(k);
  for (std::uint64_t c = 0; c < k; ++c) {
    mean[c] = f16_decode(f16_encode(step_mean(table, k, steps, c)));
  }
  fold_columns(w, mean, n, k);
}

ActnormScales e0m3_actnorm_scales(std::span<const float> table, std::uint64_t k,
                                  std::uint64_t steps) {
  ActnormScales a;
  a.static_scale.resize(k);
  double log_sum = 0;
  for (std::uint64_t c = 0; c < k; ++c) {
    a.static_scale[c] = std::max(step_mean(table, k, steps, c), 1e-12f);
    log_sum += static_cast<double>(std::log(a.static_scale[c]));  // logf: f32 in, f32 out
  }
  a.out_scale = std::exp(static_cast<float>(log_sum / static_cast<double>(k)));
  return a;
}

void e0m3_fold_actnorm(std::span<std::uint16_t> w, const ActnormScales& a, std::uint64_t n,
                       std::uint64_t k) {
  std::vector<float> r(k);
  for (std::uint64_t c = 0; c < k; ++c) {
    r[c] = f16_decode(f16_encode(a.static_scale[c] / a.out_scale));
  }
  fold_columns(w, r, n, k);
}

namespace {

// The layer of record `name`: its shape, and with fold actnorm its scales (read from the
// table; they belong in the artifact's aux dict, written before any weight).
Result<E0m3Layer> layer_of(const TorchFile& pack, const std::string& name, E0m3Fold fold) {
  const PtValue& rec = *pack.root().get(name);
  const auto& w = std::get<PtTensor>(rec.get("weight_res_q")->v);
  E0m3Layer l{name, w.shape[0], w.shape[1], {}, {}, {}, &rec, {}, 0};
  if (fold == E0m3Fold::kActnorm) {
    const auto& table = std::get<PtTensor>(rec.get("act_scale_table")->v);
    QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
    ActnormScales a = e0m3_actnorm_scales(tab, l.k, table.shape[0]);
    l.act_out_scale = a.out_scale;
    l.act_scale_static = std::move(a.static_scale);
  }
  return l;
}

// Reads, folds and quantizes layer l's weight into ws (buffers reused from record to record:
// no fresh pages to fault in and zero for each).
Status quantize_layer(const TorchFile& pack, const E0m3ConvertOptions& o, const E0m3Layer& l,
                      E0m3Workspace& ws) {
  const auto& w = std::get<PtTensor>(l.record->get("weight_res_q")->v);
  ws.fp16.resize(l.n * l.k);
  if (w.dtype == Dtype::kF16) {
    QR_TRY(pack.read(
        w, std::span(reinterpret_cast<std::uint8_t*>(ws.fp16.data()), ws.fp16.size() * 2)));
  } else {
    QR_ASSIGN_OR_RETURN(h, read_fp16(pack, w));
    std::copy(h.begin(), h.end(), ws.fp16.begin());
  }
  if (o.fold == E0m3Fold::kMean) {
    const auto& table = std::get<PtTensor>(l.record->get("act_scale_table")->v);
    QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
    e0m3_fold_mean(ws.fp16, tab, l.n, l.k, table.shape[0]);
  } else if (o.fold == E0m3Fold::kActnorm) {
    e0m3_fold_actnorm(ws.fp16, ActnormScales{l.act_scale_static, l.act_out_scale}, l.n, l.k);
  }
  ws.packed.resize(l.n * l.k / 2);
  ws.sfb.resize(sf_sm1xx_size(l.n, l.k));
  auto st = e0m3_quantize(ws.fp16, l.n, l.k, ws.packed, ws.sfb);
  if (!st.ok()) return std::move(st.error().in_file(pack.path()).in_tensor(l.name));
  return ok_status();
}

}  // namespace

Result<E0m3ConvertReport> convert_pack_e0m3(const TorchFile& pack, const PackValidation& val,
                                            const E0m3ConvertOptions& o, const std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  E0m3ConvertReport rep;
  E0m3Artifact art;
  art.pack = &pack;
  art.fold = e0m3_fold_name(o.fold);
  art.keep_fp16 = o.keep_fp16;
  for (const auto& [key, v] : std::get<PtDict>(pack.root().v)) {
    art.source_record_count += !(key->is_string() && std::get<std::string>(key->v) == "__meta__");
  }
  std::uint64_t total = 0;
  for (const std::string& name : val.records) {
    QR_ASSIGN_OR_RETURN(l, layer_of(pack, name, o.fold));
    total += l.n * l.k * 2;
    art.layers.push_back(std::move(l));
  }
  ProgressLine progress(total, o.progress);
  E0m3Workspace ws;
  // Layer i is quantized into ws when the .pt file reaches it, so one record's buffers are held
  // at a time; the safetensors container keeps every layer's bytes until it is written.
  const auto produce = [&](std::size_t i) -> Status {
    const E0m3Layer& l = art.layers[i];
    progress.update(l.name, rep.fp16_bytes);
    QR_TRY(quantize_layer(pack, o, l, ws));
    ws.layer = i;
    rep.fp16_bytes += l.n * l.k * 2;
    ++rep.records;
    return ok_status();
  };
  if (o.container == E0m3Container::kTorch) {
    QR_TRY(write_e0m3_torch(art, ws, out, produce));
  } else {
    for (std::size_t i = 0; i < art.layers.size(); ++i) {
      QR_TRY(produce(i));
      E0m3Layer& l = art.layers[i];
      l.packed.assign(ws.packed.begin(), ws.packed.end());
      l.sfb.assign(ws.sfb.begin(), ws.sfb.end());
      if (o.keep_fp16) l.fp16.assign(ws.fp16.begin(), ws.fp16.end());
    }
    QR_TRY(write_e0m3_safetensors(art, out));
  }
  progress.update("written " + out, rep.fp16_bytes);
  progress.finish();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
