// DeepSeek V4 Flash (model_type deepseek_v4) as its runtime c/deepseek_v4.c computes it: one
// token at a time through every layer (a window ring, per-layer compressor and indexer state),
// with the runtime's activation rounding between steps (deepseek_v4_quant.h): e4m3
// quantize-dequantize per 128 inputs before every FP8 / FP4 product, bf16 rounding after
// them, after norms, rope, attention and each hyper-connection update. docs/model.md
// "DeepSeek V4 Flash".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/deepseek_v4_config.h"
#include "model/forward_common.h"

namespace qrepack::model {

using Vec = std::vector<float>;

/// coli_v4_compressor_step's state: ratio rows (two groups of 4 at ratio 4, whose
/// projections are twice `dim` wide and overlap) of kv and gate + ape scores.
struct V4Compressor {
  std::string prefix;
  std::uint64_t ratio = 0, dim = 0;
  bool fp4 = false;  ///< the indexer's: Hadamard + e2m1 instead of e4m3 on the non-rope part
  Matrix kv, score;
};

struct V4LayerState {
  std::vector<Vec> window, compressed, index_keys;
  V4Compressor comp, index_comp;
};

struct V4Run {
  WeightCache& w;
  const DsV4Config& c;
  std::vector<V4LayerState> layers;
};

/// `rows` rows from `row0` of `name` ([out, x.size()] overall) times x, x e4m3-quantized per
/// 128 first when `qdq` (the FP8 / FP4 products), in a fixed order.
Result<Vec> v4_matvec(WeightCache& w, const std::string& name, std::uint64_t out, const Vec& x,
                      bool qdq);
/// RoPE of `x` (rope_head_dim values, interleaved pairs) at position p, the runtime's float
/// frequencies (YaRN on compressing layers whenever original_max_position_embeddings is set).
void v4_rope(const DsV4Config& c, float* x, std::uint64_t p, bool compressed, bool inverse);
void v4_rms(Vec& x, std::span<const float> weight, float eps);

/// One compressor step at position `pos` on the normed block input x: the new compressed row
/// when a group completes.
Result<std::optional<Vec>> v4_compress(V4Run& r, V4Compressor& s, const Vec& x, std::uint64_t pos);
/// Layer l's attention output for the normed block input x at position pos.
Result<Vec> v4_attention(V4Run& r, std::uint64_t l, const Vec& x, std::uint64_t pos);

/// The final hidden state (after hc_head and the norm) of every position of `ids`.
Result<Matrix> dsv4_runtime_hidden(WeightCache& w, const DsV4Config& c,
                                   std::span<const std::uint32_t> ids);

}  // namespace qrepack::model
