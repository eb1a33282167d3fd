// Candidate lists of the E8/IQ3 nearest-entry search (docs/formats/e8-iq3.md, "Pruned search").
// A group of four magnitudes m under a sub-scale db is the point q = m / db; each coordinate's
// nearest level (2, 6, ..., 26, 31) puts q in one of 8^4 cells. A cell's list holds every
// codebook entry that no other entry beats by more than kDominanceMargin (in units of |q - g|^2)
// everywhere in the cell widened by kCellSlack, so the reference's float argmin over all 256
// entries equals the argmin over the list whenever kMarginHolds says the float criterion's
// rounding cannot bridge that margin.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace qrepack::e8 {

inline constexpr int kCells = 4096;
inline constexpr int kChunk = 16;  ///< lists are padded to a multiple of this (last entry repeated)
inline constexpr int kMinChunks = 2;  ///< and to at least this many chunks (98% of lists fit)
inline constexpr double kDominanceMargin = 0.5;
inline constexpr double kCellSlack = 1.0 / 1024;

/// Cell of four level indices: l0 | l1 << 3 | l2 << 6 | l3 << 9.
inline int cell_of(const std::int32_t l[4]) { return l[0] | l[1] << 3 | l[2] << 6 | l[3] << 9; }

/// kChunk candidates of a cell: their squared norms, halved coordinates (small integers) and
/// entry indices (ascending).
struct alignas(16) Chunk {
  float g2[kChunk];
  std::int8_t g[4][kChunk];
  std::uint8_t index[kChunk];
};

/// One cell's candidates: `chunks` (>= kMinChunks) records, the last padded by repeating its last
/// entry.
struct CellList {
  const Chunk* chunk;
  std::uint32_t chunks;
};

/// Every cell's list: built on first use (tens of microseconds each), then shared read-only by
/// every thread. list() is inline: the kernel looks a list up for every group it searches.
class CellLists {
 public:
  CellList list(int cell) const {
    const auto c = static_cast<std::size_t>(cell);
    std::uint32_t n = count_[c].load(std::memory_order_acquire);
    if (n == 0) n = build(cell);
    return CellList{chunks_ + first_[c], n};
  }

 private:
  friend const CellLists& cell_lists();
  CellLists();
  std::uint32_t build(int cell) const;  ///< under a lock; returns the list's chunks

  Chunk* chunks_;                                     ///< room for every list at its longest
  mutable std::size_t used_ = 0;                      ///< chunks handed out
  mutable std::uint32_t first_[kCells] = {};          ///< a cell's first chunk
  mutable std::atomic<std::uint32_t> count_[kCells];  ///< its chunks; 0: not built yet
};

/// The process's lists.
const CellLists& cell_lists();

/// The list of `cell` (0..4095).
inline CellList cell_list(int cell) { return cell_lists().list(cell); }

/// Whether the margin covers the rounding of the criterion (db * |g|^2) + (-2 * m.g) for a
/// group whose magnitudes sum to `m_sum`: twice its error bound, u (8000 db + 320 m_sum), stays
/// below kDominanceMargin * db. Always true for the encoder's groups: sum(m) <= 64 RMS of the
/// block and db >= RMS / 120 even at the coarsest fp16 subnormal super-scale, so m_sum / db <=
/// 7680 (docs/formats/e8-iq3.md).
inline bool margin_holds(float m_sum, float db) { return m_sum < 13000.0f * db; }

}  // namespace qrepack::e8
