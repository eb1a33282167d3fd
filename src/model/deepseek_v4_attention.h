// DeepSeek V4.1's attention as c/deepseek_v41.c's attention_run and dsv41_ref.py compute it
// for a prompt (the prefill path, every position's output): MQA with one KV per position and
// an attention sink per head; a sliding window over the raw KV; on compressing layers
// (compress_ratios[l] = r > 0) the compressed KV of the nearest kv source layer (r positions
// pooled by a per-channel softmax gate, RMS-normed, rotated at the group's first position)
// read at the positions the DSA indexer picks (relu(q . k) weighted per head, top index_topk,
// two-level when a candidate source layer narrows the blocks); the output's rope tail rotated
// back, projected per o_group by wo_a, then by wo_b. Interleaved RoPE on the last
// rope_head_dim channels; window-only layers at rope_theta, compressing ones at
// compress_rope_theta with YaRN.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v4_config.h"
#include "model/forward_common.h"

namespace qrepack::model {

/// model.py precompute_freqs_cis: cos / sin of position * freq, freq[k] = base^(-2k / dim) in
/// f32, YaRN-corrected when 0 < original_seq_len < max_positions.
struct DsRope {
  std::uint64_t half = 0;
  std::vector<float> cos, sin;  ///< [t][half]
  static DsRope make(const DsV4Config& c, bool compressed, std::uint64_t t);
  /// Rotates the interleaved pairs of x (2 * half floats) at position p (backwards: inverse).
  void apply(float* x, std::uint64_t p, bool inverse) const;
};

/// What a source layer publishes for the layers after it, per sequence (model.py's
/// shared_attn).
struct DsShared {
  Matrix compress_kv;              ///< [groups, head_dim], rotated: the nearest kv source's
  Matrix index_k;                  ///< [groups, index_head_dim], rotated: the nearest kv source's
  std::vector<std::int64_t> topk;  ///< [n][topk_width]: kv_all rows, -1 empty
  std::uint64_t topk_width = 0;
  std::vector<std::uint8_t> keep;  ///< candidate blocks [n][keep_width]
  std::uint64_t keep_width = 0;
};

struct DsRopes {
  DsRope window, compressed;
};

/// Layer l's attention for every row of x ([N, dim], the normed block input) of batch b;
/// `shared` holds one DsShared per sequence, updated by source layers.
Result<Matrix> dsv4_attention(WeightCache& w, const DsV4Config& c, const DsRopes& ropes,
                              std::uint64_t l, const Matrix& x, const Batch& b,
                              std::vector<DsShared>& shared);

/// The indexer's picks for one sequence (rows [r0, r0 + n) of x and qr): per row,
/// min(index_topk, n / ratio) compressed rows + `n` (the window rows before them in kv_all),
/// in position order, -1 for an empty slot; updates the candidate mask at the candidate
/// source layer and applies it after. The index keys are the nearest kv source's (at or
/// before l), as dsv41_ref.py's prefill and c/deepseek_v41.c with V41_INDEX_OWNER read them;
/// docs/model.md says where the runtime's one-token decode steps read others.
Status dsv4_indexer(WeightCache& w, const DsV4Config& c, const DsRope& rope, std::uint64_t l,
                    const Matrix& x, const Matrix& qr, std::uint64_t r0, std::uint64_t n,
                    DsShared& s);

}  // namespace qrepack::model
