// DeepSeek V4.1's engram: n-gram hash lookups into an FP8 row table, gated into every
// hyper-connection copy of the residual stream before a layer's block (the vendor's
// engram.py, as c/deepseek_v41.c's engram_run and dsv41_ref.py's NgramHash / Engram compute
// it). The hash tables come from dsv41_engram.json (prepare_dsv41.py).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/deepseek_v4_config.h"
#include "model/forward_common.h"

namespace qrepack::model {

/// dsv41_engram.json in `dir`, checked against config.json's engram_layer_ids, vocab and
/// layer count (shapes, caps, multipliers as decimal strings).
Result<DsEngram> load_dsv41_engram(const std::string& dir, const std::vector<std::uint64_t>& ids,
                                   std::uint64_t vocab, std::uint64_t layers);

/// The row ids (offsets included) of the n-grams ending at each position of one sequence:
/// [ids.size()][e.cols()]. Products and XORs wrap as int64 (two's complement); the bucket is
/// the floor remainder by the prime (torch's %), so it is never negative.
std::vector<std::uint64_t> engram_row_ids(const DsEngram& e, const DsEngramTable& t,
                                          std::span<const std::uint32_t> ids);

/// Adds the engram of `t`'s layer to h ([n, hc * dim], the rows of one sequence starting at
/// row `r0`, tokens `ids`): per copy c, h_c += sigmoid(ssqrt(dot)) * value with dot =
/// (h_c . (q_weight_c * k_weight_c * key_c)) * rstd(h_c) * rstd(key_c) / sqrt(dim).
Status apply_engram(WeightCache& w, const DsV4Config& c, const DsEngramTable& t, Matrix& h,
                    std::uint64_t r0, std::span<const std::uint32_t> ids);

}  // namespace qrepack::model
