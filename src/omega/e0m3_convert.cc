#include "qrepack/omega/e0m3_convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "omega/e0m3_artifact.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/parallel/ordered_pipeline.h"
#include "qrepack/parallel/parallel_for.h"
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
void fold_columns(std::span<std::uint16_t> w, std::span<const float> r, std::uint64_t n,
                  std::uint64_t k) {
  for (std::uint64_t row = 0; row < n; ++row) {
    for (std::uint64_t c = 0; c < k; ++c) {
      auto& x = w[row * k + c];
      x = f16_encode(f16_decode(x) * r[c]);
    }
  }
}

// fold=mean's factors: fp16(table.mean(0)).
std::vector<float> mean_factors(std::span<const float> table, std::uint64_t k,
                                std::uint64_t steps) {
  std::vector<float> mean(k);
  for (std::uint64_t c = 0; c < k; ++c) {
    mean[c] = f16_decode(f16_encode(step_mean(table, k, steps, c)));
  }
  return mean;
}

// fold=actnorm's factors: fp16(s / c).
std::vector<float> actnorm_factors(const ActnormScales& a, std::uint64_t k) {
  std::vector<float> r(k);
  for (std::uint64_t c = 0; c < k; ++c) {
    r[c] = f16_decode(f16_encode(a.static_scale[c] / a.out_scale));
  }
  return r;
}

}  // namespace

void e0m3_fold_rows(std::span<std::uint16_t> w, std::span<const float> r, std::uint64_t n,
                    std::uint64_t k) {
  fold_columns(w, r, n, k);
}

void e0m3_fold_mean(std::span<std::uint16_t> w, std::span<const float> table, std::uint64_t n,
                    std::uint64_t k, std::uint64_t steps) {
  fold_columns(w, mean_factors(table, k, steps), n, k);
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
  fold_columns(w, actnorm_factors(a, k), n, k);
}

namespace {

// The layer of record `name`: its shape, and with fold actnorm its scales (read from the
// table; they belong in the artifact's aux dict, written before any weight).
Result<E0m3Layer> layer_of(const TorchFile& pack, const std::string& name, E0m3Fold fold) {
  const PtValue& rec = *pack.root().get(name);
  const auto& w = std::get<PtTensor>(rec.get("weight_res_q")->v);
  E0m3Layer l{name, w.shape[0], w.shape[1], &rec, {}, 0};
  if (fold == E0m3Fold::kActnorm) {
    const auto& table = std::get<PtTensor>(rec.get("act_scale_table")->v);
    QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
    ActnormScales a = e0m3_actnorm_scales(tab, l.k, table.shape[0]);
    l.act_out_scale = a.out_scale;
    l.act_scale_static = std::move(a.static_scale);
  }
  return l;
}

// Reads, folds and quantizes layer l's weight, writing its packed bytes to `packed` in row
// order and its scale bytes to ws.sfb (and the folded weight to ws.fp16 with keep_fp16).
// Blocks of rows, about kBlockBytes of fp16 each, run on the ordered pipeline: each is read,
// folded and quantized in its slot's buffers while in cache, and appended in order while the
// next ones are made. A weight that is not contiguous fp16 is read (converted) whole first.
// Buffers are reused from record to record: no fresh pages to fault in and zero for each.
Status stream_layer(const TorchFile& pack, const E0m3ConvertOptions& o, const E0m3Layer& l,
                    std::span<const float> factors, E0m3Workspace& ws, ByteSink& packed) {
  constexpr std::uint64_t kBlockBytes = 512 << 10;
  const auto& w = std::get<PtTensor>(l.record->get("weight_res_q")->v);
  ws.sfb.resize(sf_sm1xx_size(l.n, l.k));
  std::fill(ws.sfb.begin(), ws.sfb.end(), 0);
  const bool blockwise_read = w.dtype == Dtype::kF16 && w.contiguous();
  const bool whole = o.keep_fp16 || !blockwise_read;  // the layer's fp16 held at once
  ws.fp16.resize(whole ? l.n * l.k : 0);
  if (!blockwise_read) {
    QR_ASSIGN_OR_RETURN(h, read_fp16(pack, w));
    std::copy(h.begin(), h.end(), ws.fp16.begin());
  }
  if (l.n == 0 || l.k == 0) return ok_status();  // nothing to quantize (nor refused before)
  const std::uint64_t block_rows = std::max<std::uint64_t>(1, kBlockBytes / (l.k * 2));
  const std::uint64_t blocks = (l.n + block_rows - 1) / block_rows;
  const std::size_t slots = 2 * thread_count() + 2;
  ws.slot_fp16.resize(slots);
  ws.slot_packed.resize(slots);
  const auto rows_of = [&](std::size_t b) {
    const std::uint64_t r0 = b * block_rows;
    return std::pair{r0, std::min(l.n, r0 + block_rows)};
  };
  const auto produce = [&](std::size_t b, std::size_t slot, std::size_t) -> Status {
    const auto [r0, r1] = rows_of(b);
    const std::uint64_t count = (r1 - r0) * l.k;
    std::span<std::uint16_t> rows;
    if (whole) {
      rows = std::span(ws.fp16.data() + r0 * l.k, count);
    } else {
      ws.slot_fp16[slot].resize(count);
      rows = ws.slot_fp16[slot];
    }
    if (blockwise_read) {
      QR_TRY(pack.read_elements(
          w, r0 * l.k, count, std::span(reinterpret_cast<std::uint8_t*>(rows.data()), count * 2)));
    }
    if (!factors.empty()) e0m3_fold_rows(rows, factors, r1 - r0, l.k);
    ws.slot_packed[slot].resize(count / 2);
    e0m3_quantize_rows(rows, ws.slot_packed[slot], r0, l.k, ws.sfb, l.n);
    return ok_status();
  };
  const auto consume = [&](std::size_t, std::size_t slot) {
    return packed.write(ws.slot_packed[slot]);
  };
  return ordered_pipeline(blocks, slots, produce, consume);
}

}  // namespace

Result<std::vector<float>> e0m3_fold_factors(const TorchFile& pack, E0m3Fold fold,
                                             const E0m3Layer& l) {
  if (fold == E0m3Fold::kMean) {
    const auto& table = std::get<PtTensor>(l.record->get("act_scale_table")->v);
    QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
    return mean_factors(tab, l.k, table.shape[0]);
  }
  if (fold == E0m3Fold::kActnorm) {
    return actnorm_factors(ActnormScales{l.act_scale_static, l.act_out_scale}, l.k);
  }
  return std::vector<float>{};
}

Result<E0m3ConvertReport> convert_pack_e0m3(const TorchFile& pack, const PackValidation& val,
                                            const E0m3ConvertOptions& o, const std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  E0m3ConvertReport rep;
  E0m3Artifact art;
  art.pack = &pack;
  art.fold = e0m3_fold_name(o.fold);
  art.keep_fp16 = o.keep_fp16;
  art.act_out_scale_tensor = o.act_out_scale_tensor;
  for (const auto& [key, v] : std::get<PtDict>(pack.root().v)) {
    art.source_record_count += !(key->is_string() && std::get<std::string>(key->v) == "__meta__");
  }
  std::uint64_t total = 0;
  std::vector<std::vector<float>> factors;
  for (const std::string& name : val.records) {
    QR_ASSIGN_OR_RETURN(l, layer_of(pack, name, o.fold));
    if (auto st = e0m3_check_k(l.k); !st.ok()) {  // the validator refuses such records first
      return std::move(st.error().in_file(pack.path()).in_tensor(l.name));
    }
    QR_ASSIGN_OR_RETURN(f, e0m3_fold_factors(pack, o.fold, l));
    factors.push_back(std::move(f));
    total += l.n * l.k * 2;
    art.layers.push_back(std::move(l));
  }
  ProgressLine progress(total, o.progress);
  if (o.container == E0m3Container::kSafetensors) {
    QR_TRY(write_e0m3_safetensors(
        art, factors, out, [&](std::uint64_t done) { progress.update("quantizing", done); }));
    rep.fp16_bytes = total;
    rep.records = art.layers.size();
  } else {
    E0m3Workspace ws;
    // Layer i streams when the .pt file reaches its packed storage, so one record's buffers
    // are held at a time.
    const auto produce = [&](std::size_t i, ByteSink& packed) -> Status {
      const E0m3Layer& l = art.layers[i];
      progress.update(l.name, rep.fp16_bytes);
      ws.layer = SIZE_MAX;
      QR_TRY(stream_layer(pack, o, l, factors[i], ws, packed));
      ws.layer = i;
      rep.fp16_bytes += l.n * l.k * 2;
      ++rep.records;
      return ok_status();
    };
    QR_TRY(write_e0m3_torch(art, ws, out, produce));
  }
  progress.update("written " + out, rep.fp16_bytes);
  progress.finish();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
