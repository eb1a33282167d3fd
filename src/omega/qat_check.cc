// `qrepack check CKPT.safetensors --artifact A`: a QAT artifact against its checkpoint.
#include <fmt/format.h>

#include "core/problems.h"
#include "omega/check_activations.h"
#include "omega/check_math.h"
#include "qrepack/formats/float16.h"
#include "qrepack/io/torch_values.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/omega/e0m3_check.h"
#include "qrepack/omega/qat_convert.h"
#include "qrepack/schemes/e0m3_sfb.h"

namespace qrepack {
namespace {

// The checkpoint's expert weight of artifact layer `name` ("<name>.weight").
const TensorEntry* weight_of(const SafetensorsFile& ck, const std::string& name) {
  const std::string want = name + ".weight";
  if (!qat_expert_layer(want)) return nullptr;
  for (const TensorEntry& t : ck.tensors()) {
    if (t.name == want) return &t;
  }
  return nullptr;
}

E0m3Source qat_source(const SafetensorsFile& ck) {
  return {"checkpoint", "2-D action-expert weight (<layer>.weight)",
          [&ck](const std::string& name) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
            const TensorEntry* t = weight_of(ck, name);
            if (!t || t->shape.size() != 2) return std::nullopt;
            return std::pair{t->shape[0], t->shape[1]};
          }};
}

const PtTensor* tensor_at(const PtValue& d, const char* key) {
  const PtValue* v = d.is_dict() ? d.get(key) : nullptr;
  return v && v->is_tensor() ? &std::get<PtTensor>(v->v) : nullptr;
}

// Blocks [count, 64, 64] that are each the identity.
Result<bool> identity_blocks(const TorchFile& art, const PtTensor* t, std::uint64_t count) {
  constexpr std::uint64_t b = kQatRotationBlock;
  if (!t || !is_float_dtype(t->dtype) || t->shape != std::vector<std::uint64_t>{count, b, b}) {
    return false;
  }
  QR_ASSIGN_OR_RETURN(v, read_f32(art, *t));
  for (std::uint64_t i = 0; i < v.size(); ++i) {
    const std::uint64_t r = (i / b) % b, c = i % b;
    if (v[i] != (r == c ? 1.0f : 0.0f)) return false;
  }
  return true;
}

Result<bool> arange(const TorchFile& art, const PtTensor* t, std::uint64_t k) {
  if (!t || t->dtype != Dtype::kI64 || t->shape != std::vector<std::uint64_t>{k}) return false;
  QR_ASSIGN_OR_RETURN(v, read_i64(art, *t));
  for (std::uint64_t i = 0; i < k; ++i) {
    if (v[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

// A QAT weight is in the unrotated basis: the consumer's rotations must be the identity.
Status check_identity_aux(const TorchFile& art, const std::string& name, std::uint64_t n,
                          std::uint64_t k, Problems& p) {
  const PtValue* aux = art.root().get("aux")->get(name);
  const auto bad = [&](const char* field, const char* want) {
    p.add(ErrorKind::kInvalidRecord,
          fmt::format("aux['{}'].{} must be {}: a QAT weight is not rotated", name, field, want));
  };
  QR_ASSIGN_OR_RETURN(in, identity_blocks(art, tensor_at(*aux, "duquant_rotation_blocks"), k / 64));
  if (!in) bad("duquant_rotation_blocks", "identity 64x64 blocks");
  QR_ASSIGN_OR_RETURN(out,
                      identity_blocks(art, tensor_at(*aux, "duquant_rotation_out_blocks"), n / 64));
  if (!out) bad("duquant_rotation_out_blocks", "identity 64x64 blocks");
  QR_ASSIGN_OR_RETURN(perm, arange(art, tensor_at(*aux, "duquant_rotation_perm"), k));
  if (!perm) bad("duquant_rotation_perm", "int64 arange(K)");
  return ok_status();
}

}  // namespace

Status validate_qat_artifact(const TorchFile& art, const SafetensorsFile& ck) {
  QR_TRY(validate_e0m3_artifact(art, qat_source(ck)));
  const auto fail = [&](Error e) {
    return std::move(e.in_file(art.path()).with_rule("omega.artifact"));
  };
  if (std::get<std::string>(art.root().get("fold")->v) != "none") {
    return fail(Error(ErrorKind::kInvalidRecord,
                      "fold must be \"none\" for a QAT artifact (there is no scale table)"));
  }
  Problems p;
  for (const auto& [key, w] : std::get<PtDict>(art.root().get("weights")->v)) {
    if (!key->is_string()) continue;
    const std::string& name = std::get<std::string>(key->v);
    const auto& shape = std::get<PtTensor>(w->get("packed")->v).shape;
    QR_TRY(check_identity_aux(art, name, shape[0], shape[1] * 2, p));
  }
  if (!p.empty()) return fail(p.to_error(20));
  return ok_status();
}

Result<LayerCheck> check_layer_qat_artifact(const SafetensorsFile& ck, const TorchFile& art,
                                            const CheckOptions& o) {
  if (o.tokens == 0) return Error(ErrorKind::kUsage, "--tokens must be positive");
  if (!o.artifact_validated) QR_TRY(validate_qat_artifact(art, ck));
  QR_ASSIGN_OR_RETURN(w, e0m3_artifact_layer(art, o.layer));
  const TensorEntry& t = *weight_of(ck, o.layer);  // validated: present and 2-D
  const std::uint64_t n = t.shape[0], k = t.shape[1], m = o.tokens;
  QatReadBuffers buffers;
  QR_ASSIGN_OR_RETURN(w16, read_qat_weight_fp16(ck, t, buffers));
  std::vector<float> wf(w16.size()), xf(m * k);
  f16_decode_span(w16, wf);
  const std::vector<std::uint16_t> x = synthetic_x(o.seed, m, k);
  f16_decode_span(x, xf);
  const std::vector<float> y_fp = matmul_nt(xf, wf, m, n, k);
  QR_ASSIGN_OR_RETURN(packed, read_u8(art, std::get<PtTensor>(w->get("packed")->v)));
  QR_ASSIGN_OR_RETURN(sfb, read_u8(art, std::get<PtTensor>(w->get("sfb")->v)));
  std::vector<float> b(n * k), a(m * k);
  e0m3_dequantize(packed, sfb, n, k, b);
  std::vector<std::uint8_t> xp(m * k / 2), xs(sf_sm1xx_size(m, k));
  QR_TRY(e0m3_quantize(x, m, k, xp, xs));
  e0m3_dequantize(xp, xs, m, k, a);
  LayerCheck out;
  out.layer = o.layer;
  out.n = n;
  out.k = k;
  out.steps = 0;
  out.rows.push_back({"artifact e0m3(x) x stored B (QAT, fold none)",
                      cosine_stats(matmul_nt(a, b, m, n, k), y_fp, m, n)});
  // Whether the stored bytes are what this checkpoint's weight quantizes to.
  std::vector<std::uint8_t> own_p(n * k / 2), own_s(sf_sm1xx_size(n, k));
  QR_TRY(e0m3_quantize(w16, n, k, own_p, own_s));
  std::uint64_t diffs = 0;
  for (std::size_t i = 0; i < own_p.size(); ++i) diffs += own_p[i] != packed[i];
  for (std::size_t i = 0; i < own_s.size(); ++i) diffs += own_s[i] != sfb[i];
  out.artifact_byte_diffs = diffs;
  return out;
}

}  // namespace qrepack
