#include "qrepack/omega/e0m3_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "omega/check_activations.h"
#include "omega/check_math.h"
#include "omega/flashrt_emulate.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/omega/e0m3_convert.h"
#include "qrepack/omega/pack_validate.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {
namespace {

const PtTensor& field(const PtValue& rec, const char* name) {
  return std::get<PtTensor>(rec.get(name)->v);
}

// One validated record with its synthetic activations.
struct Layer {
  std::uint64_t n = 0, k = 0, steps = 0, m = 0;
  std::vector<std::uint16_t> w16;  ///< weight_res_q as fp16 [n, k]
  std::vector<float> w;            ///< the same as f32
  std::vector<float> table;        ///< act_scale_table [steps, k]
  std::vector<float> s_t;          ///< table row `step`
  std::vector<std::uint16_t> x2;   ///< rotated, calibrated activations, fp16 [m, k]
  std::vector<float> x;            ///< the same as f32
  std::vector<float> y_fp;         ///< x2 W^T
};

std::vector<float> decode_f16(const std::vector<std::uint16_t>& h) {
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) f[i] = f16_decode(h[i]);
  return f;
}

// x2 = calibrate(rotate(synthetic_x)) for this record and step, and y_fp = x2 W^T.
Status make_activations(const TorchFile& pack, const PtValue& rec, const CheckOptions& o,
                        Layer& l) {
  QR_ASSIGN_OR_RETURN(perm, read_i64(pack, field(rec, "duquant_rotation_perm")));
  QR_ASSIGN_OR_RETURN(blocks, read_f32(pack, field(rec, "duquant_rotation_blocks")));
  l.m = o.tokens;
  l.x2 = rotate(synthetic_x(o.seed, l.m, l.k), perm, blocks, l.m, l.k);
  calibrate(l.x2, l.s_t, l.m, l.k);
  l.x = decode_f16(l.x2);
  l.y_fp = matmul_nt(l.x, l.w, l.m, l.n, l.k);
  return ok_status();
}

Result<Layer> load_layer(const TorchFile& pack, const CheckOptions& o) {
  if (o.tokens == 0) return Error(ErrorKind::kUsage, "--tokens must be positive");
  QR_TRY(validate_omega_record(pack, o.layer));
  const PtValue& rec = *pack.root().get(o.layer);
  Layer l;
  const PtTensor& w = field(rec, "weight_res_q");
  l.n = w.shape[0];
  l.k = w.shape[1];
  const PtTensor& table = field(rec, "act_scale_table");
  l.steps = table.shape[0];
  if (o.step >= l.steps) {
    return Error(ErrorKind::kUsage, fmt::format("--step {} is out of range: record '{}' has {} "
                                                "act_scale_table rows",
                                                o.step, o.layer, l.steps))
        .in_file(pack.path());
  }
  QR_ASSIGN_OR_RETURN(w16, read_fp16(pack, w));
  l.w16 = std::move(w16);
  l.w = decode_f16(l.w16);
  QR_ASSIGN_OR_RETURN(tab, read_f32(pack, table));
  l.table = std::move(tab);
  l.s_t.assign(l.table.begin() + static_cast<std::ptrdiff_t>(o.step * l.k),
               l.table.begin() + static_cast<std::ptrdiff_t>((o.step + 1) * l.k));
  QR_TRY(make_activations(pack, rec, o, l));
  return l;
}

struct Quantized {
  std::vector<std::uint8_t> packed, sf;
};

Result<Quantized> quantize(const std::vector<std::uint16_t>& h, std::uint64_t rows,
                           std::uint64_t k) {
  Quantized q{std::vector<std::uint8_t>(rows * k / 2),
              std::vector<std::uint8_t>(sf_sm1xx_size(rows, k))};
  QR_TRY(e0m3_quantize(h, rows, k, q.packed, q.sf));
  return q;
}

std::vector<float> dequantize(const Quantized& q, std::uint64_t rows, std::uint64_t k) {
  std::vector<float> f(rows * k);
  e0m3_dequantize(q.packed, q.sf, rows, k, f);
  return f;
}

// fp16(x2 / s_t): the S1 activations.
std::vector<std::uint16_t> divided_by_step_scale(const Layer& l) {
  std::vector<std::uint16_t> h(l.m * l.k);
  for (std::uint64_t t = 0; t < l.m; ++t) {
    for (std::uint64_t c = 0; c < l.k; ++c)
      h[t * l.k + c] = f16_encode(l.x[t * l.k + c] / l.s_t[c]);
  }
  return h;
}

Result<std::vector<float>> e0m3_roundtrip(const std::vector<std::uint16_t>& h, std::uint64_t rows,
                                          std::uint64_t k) {
  QR_ASSIGN_OR_RETURN(q, quantize(h, rows, k));
  return dequantize(q, rows, k);
}

// FlashRT's checker emulation of S0 and S1 (its e0m3_emulate; its S1 weight is W * mean s in
// f32, not rounded to fp16): the numbers that checker prints, beside the exact ones.
template <typename Add>
void add_flashrt_rows(const Layer& l, const CheckOptions& o, const Add& add) {
  {
    const auto a0 = flashrt_e0m3_emulate(l.x, l.m, l.k);
    const auto b0 = flashrt_e0m3_emulate(l.w, l.n, l.k);
    add("S0 FlashRT emulation (reference checker)", matmul_nt(a0, b0, l.m, l.n, l.k));
  }
  if (!o.s1) return;
  const auto a1 = flashrt_e0m3_emulate(decode_f16(divided_by_step_scale(l)), l.m, l.k);
  std::vector<float> ws(l.w.size());
  for (std::uint64_t r = 0; r < l.n; ++r) {
    for (std::uint64_t c = 0; c < l.k; ++c) {
      float mean = 0;  // table.mean(0) in f32, steps summed in order
      for (std::uint64_t t = 0; t < l.steps; ++t) mean += l.table[t * l.k + c];
      ws[r * l.k + c] = l.w[r * l.k + c] * (mean / static_cast<float>(l.steps));
    }
  }
  const auto b1 = flashrt_e0m3_emulate(ws, l.n, l.k);
  add("S1 FlashRT emulation (reference checker)", matmul_nt(a1, b1, l.m, l.n, l.k));
}

LayerCheck header(const CheckOptions& o, const Layer& l) {
  LayerCheck c;
  c.layer = o.layer;
  c.n = l.n;
  c.k = l.k;
  c.steps = l.steps;
  return c;
}

}  // namespace

Result<LayerCheck> check_layer_emulate(const TorchFile& pack, const CheckOptions& o) {
  QR_ASSIGN_OR_RETURN(l, load_layer(pack, o));
  LayerCheck out = header(o, l);
  const auto add = [&](std::string variant, const std::vector<float>& y) {
    out.rows.push_back({std::move(variant), cosine_stats(y, l.y_fp, l.m, l.n)});
  };
  const std::vector<float> a = omega_fake_quant(l.x, l.s_t, l.m, l.k);
  add(fmt::format("omega int4 fake quant (s_t, step {})", o.step),
      matmul_nt(a, l.w, l.m, l.n, l.k));
  {  // scoped: the decoded operands are as large as the weight
    QR_ASSIGN_OR_RETURN(a0, e0m3_roundtrip(l.x2, l.m, l.k));
    QR_ASSIGN_OR_RETURN(b0, e0m3_roundtrip(l.w16, l.n, l.k));
    add("S0 e0m3(x2) x e0m3(W)", matmul_nt(a0, b0, l.m, l.n, l.k));
  }
  if (o.s1) {
    QR_ASSIGN_OR_RETURN(a1, e0m3_roundtrip(divided_by_step_scale(l), l.m, l.k));
    std::vector<std::uint16_t> wf = l.w16;
    e0m3_fold_mean(wf, l.table, l.n, l.k, l.steps);
    QR_ASSIGN_OR_RETURN(b1, e0m3_roundtrip(wf, l.n, l.k));
    add("S1 e0m3(x2/s_t) x e0m3(W*mean s)", matmul_nt(a1, b1, l.m, l.n, l.k));
  }
  if (o.emulate_flashrt) add_flashrt_rows(l, o, add);
  return out;
}

// fp16(x2 / s[c]): the actnorm activations.
std::vector<std::uint16_t> divided_by(const Layer& l, const std::vector<float>& s) {
  std::vector<std::uint16_t> h(l.m * l.k);
  for (std::uint64_t r = 0; r < l.m; ++r) {
    for (std::uint64_t c = 0; c < l.k; ++c) {
      h[r * l.k + c] = f16_encode(f16_decode(l.x2[r * l.k + c]) / s[c]);
    }
  }
  return h;
}

// aux act_scale_static (f32 [K], finite and positive) and act_out_scale (a float, or the 0-d
// float32 tensor qrepack writes; finite and positive).
Result<ActnormScales> read_actnorm(const TorchFile& art, const PtValue& aux,
                                   const std::string& layer) {
  const auto bad = [&](const char* why) {
    return Error(ErrorKind::kInvalidRecord, fmt::format("aux['{}'].{}", layer, why))
        .in_file(art.path())
        .with_rule("omega.artifact");
  };
  ActnormScales a;
  QR_ASSIGN_OR_RETURN(st, read_f32(art, std::get<PtTensor>(aux.get("act_scale_static")->v)));
  a.static_scale = std::move(st);
  const PtValue& out = *aux.get("act_out_scale");
  if (const auto* d = std::get_if<double>(&out.v)) {
    a.out_scale = static_cast<float>(*d);
  } else {
    QR_ASSIGN_OR_RETURN(ov, read_f32(art, std::get<PtTensor>(out.v)));
    a.out_scale = ov.at(0);
  }
  for (float v : a.static_scale) {
    if (!(std::isfinite(v) && v > 0)) return bad("act_scale_static holds a value not > 0");
  }
  if (!(std::isfinite(a.out_scale) && a.out_scale > 0)) return bad("act_out_scale is not > 0");
  return a;
}

Result<LayerCheck> check_layer_artifact(const TorchFile& pack, const TorchFile& art,
                                        const CheckOptions& o) {
  if (!o.artifact_validated) QR_TRY(validate_e0m3_artifact(art, pack));
  QR_ASSIGN_OR_RETURN(w, e0m3_artifact_layer(art, o.layer));
  const std::string& fold = std::get<std::string>(art.root().get("fold")->v);
  const bool mean = fold == "mean";
  QR_ASSIGN_OR_RETURN(l, load_layer(pack, o));
  std::optional<ActnormScales> actnorm;
  if (fold == "actnorm") {
    QR_ASSIGN_OR_RETURN(a, read_actnorm(art, *art.root().get("aux")->get(o.layer), o.layer));
    actnorm = std::move(a);
  }
  LayerCheck out = header(o, l);
  Quantized stored;
  QR_ASSIGN_OR_RETURN(packed, read_u8(art, field(*w, "packed")));
  QR_ASSIGN_OR_RETURN(sfb, read_u8(art, field(*w, "sfb")));
  stored.packed = std::move(packed);
  stored.sf = std::move(sfb);
  const std::vector<float> b = dequantize(stored, l.n, l.k);
  // The activations the runtime feeds this fold: x2, fp16(x2 / s_t), or fp16(x2 / static)
  // with the GEMM's alpha = act_out_scale.
  const std::vector<std::uint16_t> act = mean      ? divided_by_step_scale(l)
                                         : actnorm ? divided_by(l, actnorm->static_scale)
                                                   : l.x2;
  QR_ASSIGN_OR_RETURN(a, e0m3_roundtrip(act, l.m, l.k));
  std::vector<float> y = matmul_nt(a, b, l.m, l.n, l.k);
  if (actnorm) {
    for (float& v : y) v *= actnorm->out_scale;
  }
  out.rows.push_back({fmt::format("artifact e0m3(A) x stored B (fold {})", fold),
                      cosine_stats(y, l.y_fp, l.m, l.n)});
  // Whether the stored bytes are what this pack quantizes to (informational, not the gate).
  std::vector<std::uint16_t> wf = l.w16;
  if (mean) e0m3_fold_mean(wf, l.table, l.n, l.k, l.steps);
  if (actnorm) e0m3_fold_actnorm(wf, e0m3_actnorm_scales(l.table, l.k, l.steps), l.n, l.k);
  QR_ASSIGN_OR_RETURN(own, quantize(wf, l.n, l.k));
  std::uint64_t diffs = 0;
  for (std::size_t i = 0; i < own.packed.size(); ++i) diffs += own.packed[i] != stored.packed[i];
  for (std::size_t i = 0; i < own.sf.size(); ++i) diffs += own.sf[i] != stored.sf[i];
  out.artifact_byte_diffs = diffs;
  return out;
}

}  // namespace qrepack
