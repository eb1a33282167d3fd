// The omega_e0m3_v1 artifact's content before it is written, and its two containers: the
// torch .pt dict of reference/flashrt_omega.md §3.4 and a safetensors file holding the same
// tensors (<layer>.packed, <layer>.sfb, <layer>.<aux tensor>) with every scalar in
// __metadata__.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/torch_pt.h"

namespace qrepack {

struct E0m3Layer {
  std::string name;
  std::uint64_t n = 0, k = 0;
  std::vector<std::uint8_t> packed, sfb;
  std::vector<std::uint16_t> fp16;      ///< the (folded) weight, only with --keep-fp16
  const PtValue* record = nullptr;      ///< the pack record (aux fields are copied from it)
  std::vector<float> act_scale_static;  ///< fold actnorm: s, f32 [K]
  float act_out_scale = 0;              ///< fold actnorm: c
};

struct E0m3Artifact {
  const TorchFile* pack = nullptr;
  std::string fold;
  std::uint64_t source_record_count = 0;
  std::vector<E0m3Layer> layers;  ///< sorted by name
};

/// The aux fields copied from each record, in artifact order; absent ones are skipped.
inline constexpr const char* kE0m3AuxFields[] = {"duquant_rotation_blocks",
                                                 "duquant_rotation_perm",
                                                 "duquant_rotation_out_blocks",
                                                 "act_scale_table",
                                                 "weight_bits",
                                                 "a_bits",
                                                 "in_features",
                                                 "out_features",
                                                 "rank"};

/// Moves the layers' byte vectors into the written tree.
Status write_e0m3_torch(E0m3Artifact&& a, const std::string& path);
Status write_e0m3_safetensors(const E0m3Artifact& a, const std::string& path);

}  // namespace qrepack
