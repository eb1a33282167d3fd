// Omega dit_svdquant_v1 pack -> FlashRT `omega_e0m3_v1` artifact (reference/flashrt_omega.md
// §3.3-3.4): per selected record, weight_res_q (fp16) optionally folded with the mean
// activation scale, quantized by e0m3_quantize into packed [N, K/2] + Sm1xx SFB bytes; aux
// tensors and scalars copied. Written atomically as a torch .pt loadable with weights_only=True
// (on torch 1.13 too, except fold=actnorm's float act_out_scale, which only torch 2.x reads
// unless act_out_scale_tensor asks for a 0-d tensor), or as a safetensors file with the
// scalars in __metadata__.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/progress.h"
#include "qrepack/io/torch_pt.h"
#include "qrepack/omega/pack_validate.h"

namespace qrepack {

enum class E0m3Fold : std::uint8_t {
  kNone,  ///< B = e0m3(W): the production format (S0)
  kMean,  ///< W[:, k] *= fp16(mean_t act_scale_table[t][k]) in fp16 before quantizing (S1)
  /// s = max(mean_t table, 1e-12); c = exp(mean_k log s); W[:, k] *= fp16(s[k] / c); the
  /// artifact records act_scale_static = s and act_out_scale = c (the GEMM's alpha)
  kActnorm,
};

/// "none", "mean", "actnorm".
const char* e0m3_fold_name(E0m3Fold f);

/// fold=actnorm's scales of one record (docs/formats/omega-e0m3.md §5).
struct ActnormScales {
  std::vector<float> static_scale;  ///< s: the step mean clamped at 1e-12, f32 [K]
  float out_scale = 1.0f;           ///< c: the geometric mean of s
};

/// s[k] = max(f32 sum over steps in order / T, 1e-12); c = expf(the f32 nearest the exact
/// mean of logf(s[k])), the mean summed in double. torch's own reduction order is not
/// reproducible; c may differ from it in the last bit (measured in the docs).
ActnormScales e0m3_actnorm_scales(std::span<const float> table, std::uint64_t k,
                                  std::uint64_t steps);

/// fold=actnorm on fp16 weight codes [n, k]: W[:, c] = fp16(W[:, c] * fp16(s[c] / out_scale)).
void e0m3_fold_actnorm(std::span<std::uint16_t> w, const ActnormScales& a, std::uint64_t n,
                       std::uint64_t k);

enum class E0m3Container : std::uint8_t {
  kTorch,        ///< the omega_e0m3_v1 .pt dict FlashRT loads
  kSafetensors,  ///< the same content as one safetensors file (docs/formats/omega-e0m3.md)
};

struct E0m3ConvertOptions {
  E0m3Fold fold = E0m3Fold::kNone;
  bool keep_fp16 = false;  ///< also store the (folded) fp16 weight as weight_fp16_folded
  /// fold=actnorm, .pt: store act_out_scale as a 0-d float32 tensor (loadable with weights_only
  /// on torch 1.13) instead of the Python float FlashRT writes (BINFLOAT, torch 2.x)
  bool act_out_scale_tensor = false;
  E0m3Container container = E0m3Container::kTorch;
  ProgressMode progress = ProgressMode::kAuto;
};

struct E0m3ConvertReport {
  std::size_t records = 0;
  std::uint64_t fp16_bytes = 0;  ///< fp16 weight bytes quantized
  double seconds = 0;
};

/// fold=mean on fp16 weight codes [n, k]: W[:, c] = fp16(W[:, c] * fp16(mean_t table[t][c])),
/// the mean an f32 sum over steps divided by T, the product one fp16 rounding (exact in f32).
void e0m3_fold_mean(std::span<std::uint16_t> w, std::span<const float> table, std::uint64_t n,
                    std::uint64_t k, std::uint64_t steps);

/// Converts the records `validation` selected. The pack must have passed validate_omega_pack.
Result<E0m3ConvertReport> convert_pack_e0m3(const TorchFile& pack, const PackValidation& validation,
                                            const E0m3ConvertOptions& o,
                                            const std::string& out_path);

}  // namespace qrepack
