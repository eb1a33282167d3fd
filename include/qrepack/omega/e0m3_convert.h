// Omega dit_svdquant_v1 pack -> FlashRT `omega_e0m3_v1` artifact (reference/flashrt_omega.md
// §3.3-3.4): per selected record, weight_res_q (fp16) optionally folded with the mean
// activation scale, quantized by e0m3_quantize into packed [N, K/2] + Sm1xx SFB bytes; aux
// tensors and scalars copied. Written atomically as a torch .pt loadable with weights_only=True
// on torch 1.13 and 2.x, or as a safetensors file with the scalars in __metadata__.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "qrepack/core/error.h"
#include "qrepack/core/progress.h"
#include "qrepack/io/torch_pt.h"
#include "qrepack/omega/pack_validate.h"

namespace qrepack {

enum class E0m3Fold : std::uint8_t {
  kNone,  ///< B = e0m3(W): the production format (S0)
  kMean,  ///< W[:, k] *= fp16(mean_t act_scale_table[t][k]) in fp16 before quantizing (S1)
};

enum class E0m3Container : std::uint8_t {
  kTorch,        ///< the omega_e0m3_v1 .pt dict FlashRT loads
  kSafetensors,  ///< the same content as one safetensors file (docs/formats/omega-e0m3.md)
};

struct E0m3ConvertOptions {
  E0m3Fold fold = E0m3Fold::kNone;
  bool keep_fp16 = false;  ///< also store the (folded) fp16 weight as weight_fp16_folded
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
