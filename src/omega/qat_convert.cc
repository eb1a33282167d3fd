// convert_qat_e0m3: a validated MIP-QAT checkpoint's expert weights -> the omega_e0m3_v1 .pt.
#include "qrepack/omega/qat_convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt_writer.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {
namespace {

// One layer's outputs while the file is written: made when the file reaches its packed
// storage, then read by its sfb (and fp16) storages, which follow it.
// Its buffers only grow: each is allocated and zeroed once, not once per layer.
struct QatWorkspace {
  std::size_t layer = SIZE_MAX;
  QatReadBuffers read;
  std::span<const std::uint16_t> fp16;  ///< views read.fp16
  std::vector<std::uint8_t> packed_buffer, sfb_buffer;
  std::span<std::uint8_t> packed, sfb;  ///< view the buffers
};

template <typename T>
Status write_values(ByteSink& s, std::span<const T> v) {
  return s.write(std::span(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T)));
}
template <typename T>
Status write_values(ByteSink& s, const std::vector<T>& v) {
  return write_values(s, std::span<const T>(v));
}

// The first `n` bytes of `buffer` (grown when shorter), zeroed.
std::span<std::uint8_t> zeroed_prefix(std::vector<std::uint8_t>& buffer, std::uint64_t n) {
  if (buffer.size() < n) buffer.resize(n);
  std::fill_n(buffer.begin(), n, std::uint8_t{0});
  return {buffer.data(), n};
}

// `count` 64x64 fp16 identity blocks, [count, 64, 64], written as the file reaches them.
PtOutPtr identity_blocks(std::uint64_t count) {
  constexpr std::uint64_t b = kQatRotationBlock;
  return pt_tensor_deferred(Dtype::kF16, {count, b, b}, [count](ByteSink& s) -> Status {
    std::vector<std::uint16_t> eye(b * b, 0);
    for (std::uint64_t i = 0; i < b; ++i) eye[i * b + i] = 0x3C00;  // fp16 1.0
    for (std::uint64_t c = 0; c < count; ++c) QR_TRY(write_values(s, eye));
    return ok_status();
  });
}

PtOutPtr arange_i64(std::uint64_t k) {
  return pt_tensor_deferred(Dtype::kI64, {k}, [k](ByteSink& s) {
    std::vector<std::int64_t> v(k);
    for (std::uint64_t i = 0; i < k; ++i) v[i] = static_cast<std::int64_t>(i);
    return write_values(s, v);
  });
}

PtOutPtr ones_f32(std::uint64_t k) {
  return pt_tensor_deferred(Dtype::kF32, {1, k}, [k](ByteSink& s) {
    return write_values(s, std::vector<float>(k, 1.0f));
  });
}

PtOutPtr i64(std::uint64_t v) { return pt_int(static_cast<std::int64_t>(v)); }

// The aux entry FlashRT's consumer reads, in the converter's key order.
PtOutPtr aux_of(const QatLayer& l) {
  return pt_dict({{"duquant_rotation_blocks", identity_blocks(l.k / kQatRotationBlock)},
                  {"duquant_rotation_out_blocks", identity_blocks(l.n / kQatRotationBlock)},
                  {"duquant_rotation_perm", arange_i64(l.k)},
                  {"act_scale_table", ones_f32(l.k)},
                  {"weight_bits", pt_int(4)},
                  {"a_bits", pt_int(4)},
                  {"in_features", i64(l.k)},
                  {"out_features", i64(l.n)},
                  {"rank", pt_int(0)},
                  {"fold", pt_str("none")}});
}

}  // namespace

Result<E0m3ConvertReport> convert_qat_e0m3(const SafetensorsFile& ck, const QatValidation& v,
                                           const QatConvertOptions& o, const std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  E0m3ConvertReport rep;
  std::uint64_t total = 0;
  for (const QatLayer& l : v.layers) total += l.n * l.k * 2;
  ProgressLine progress(total, o.progress);
  QatWorkspace ws;
  // Layer i is read, cast and quantized when the file reaches its packed bytes.
  const auto make = [&](std::size_t i) -> Status {
    const QatLayer& l = v.layers[i];
    progress.update(l.name, rep.fp16_bytes);
    ws.layer = SIZE_MAX;
    QR_ASSIGN_OR_RETURN(h, read_qat_weight_fp16(ck, *l.tensor, ws.read));
    ws.fp16 = h;
    ws.packed = zeroed_prefix(ws.packed_buffer, l.n * l.k / 2);
    ws.sfb = zeroed_prefix(ws.sfb_buffer, sf_sm1xx_size(l.n, l.k));
    QR_TRY(e0m3_quantize(ws.fp16, l.n, l.k, ws.packed, ws.sfb));
    ws.layer = i;
    rep.fp16_bytes += l.n * l.k * 2;
    ++rep.records;
    return ok_status();
  };
  PtOut::Dict weights, aux;
  PtOut::List names;
  for (std::size_t i = 0; i < v.layers.size(); ++i) {
    const QatLayer& l = v.layers[i];
    const auto held = [&ws, i](const char* what) { QR_CHECK(ws.layer == i, what); };
    PtOut::Dict wd = {{"packed", pt_tensor_deferred(Dtype::kU8, {l.n, l.k / 2},
                                                    [&make, &ws, i](ByteSink& s) -> Status {
                                                      QR_TRY(make(i));
                                                      return s.write(ws.packed);
                                                    })},
                      {"sfb", pt_tensor_deferred(Dtype::kU8, {sf_sm1xx_size(l.n, l.k)},
                                                 [&ws, held](ByteSink& s) {
                                                   held("qat: sfb before its layer's packed");
                                                   return s.write(ws.sfb);
                                                 })},
                      {"N", i64(l.n)},
                      {"K", i64(l.k)}};
    if (o.keep_fp16) {
      wd.emplace_back("weight_fp16_folded",
                      pt_tensor_deferred(Dtype::kF16, {l.n, l.k}, [&ws, held](ByteSink& s) {
                        held("qat: fp16 before its layer's packed");
                        return write_values(s, ws.fp16);
                      }));
    }
    weights.emplace_back(l.name, pt_dict(std::move(wd)));
    aux.emplace_back(l.name, aux_of(l));
    names.push_back(pt_str(l.name));
  }
  const auto meta = pt_dict({{"format", pt_str(kQatSourceFormat)}, {"ckpt", pt_str(o.ckpt_label)}});
  const auto artifact = pt_dict({{"format", pt_str("omega_e0m3_v1")},
                                 {"schema_version", pt_int(1)},
                                 {"source_pack_meta", meta},
                                 {"source_record_count", i64(v.matched)},
                                 {"selected_record_count", i64(names.size())},
                                 {"selected_layers", pt_list(std::move(names))},
                                 {"fold", pt_str("none")},
                                 {"weights", pt_dict(std::move(weights))},
                                 {"aux", pt_dict(std::move(aux))}});
  QR_TRY(write_torch_file(out, artifact));
  progress.update("written " + out, rep.fp16_bytes);
  progress.finish();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
