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
  Matrix compress_kv;  ///< [groups, head_dim], rotated: the nearest kv source's
  /// Per layer, the index keys a kv source computed in this pass and in the one before (the
  /// runtime's decode steps may read a later layer's, published at an earlier position).
  std::vector<Matrix> index_k, prev_index_k;
  std::uint64_t chunk = 0;     ///< rows [0, chunk) are one prefill chunk; later rows decode steps
  bool read_previous = false;  ///< whether a row read prev_index_k in this pass
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
/// source layer and applies it after. Which index keys a row scores follows the runtime: a row
/// of the prefill chunk reads its nearest kv source's (at or before l); a decode step reads
/// those model.py's module-level shared_attn holds, i.e. of the kv source that published last
/// in (position, layer) order -- at this position up to l, else at the latest earlier one, else
/// the chunk's last -- with the rows it had then (later rows are the buffer's zeros).
Status dsv4_indexer(WeightCache& w, const DsV4Config& c, const DsRope& rope, std::uint64_t l,
                    const Matrix& x, const Matrix& qr, std::uint64_t r0, std::uint64_t n,
                    DsShared& s);

}  // namespace qrepack::model
