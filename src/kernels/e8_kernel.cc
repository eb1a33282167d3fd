// E8/IQ3 encoder (reference: e8_encode_row_ref in schemes/e8_iq3.cc), the same bytes with far
// less work (docs/formats/e8-iq3.md, "Pruned search"):
//  - codes: a sub-block's 16 sub-scales are tried from the least lower bound on their error (each
//    weight's error to its nearest level, a superset of the codebook's points); a code whose
//    bound, less a margin for every rounding of the reference's error sum, exceeds the best
//    error found cannot win and is skipped;
//  - entries: a group's nearest entry under a code is searched only among its cell's candidate
//    list (schemes/e8_cells.h) with the reference's own f32 criterion; the margin the lists are
//    built with covers the criterion's rounding for every input (a checked invariant).
// Every error and criterion that decides a byte is computed as the reference does, so the
// pruning never changes the output; targets differ only in how fast a bound is summed.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/kernels.h"
#include "schemes/e8_cells.h"
#include "schemes/e8_ref.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/e8_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The read-only tables, looked up once per row.
struct Tables {
  const e8::CellLists& lists;
  const e8::RefGrid& grid;
};

// Per sub-block: |m|^2, sum(m) and each group's f32 sum of four.
struct SubBlock {
  double m2 = 0, m_sum = 0;
  float group_sums[8];
};

// Per sub-block: each code's scale and error bound; for the code being searched, each weight's
// level.
struct CodeBounds {
  HWY_ALIGN std::array<float, 16> db;
  HWY_ALIGN std::array<float, 16> bound;
  HWY_ALIGN std::array<std::int32_t, 32> level;
};

// Each code's error against each weight's nearest level (lanes are codes: one pass over the 32
// weights serves all 16). The level of q is min(floor(q / 4), 6) + (q >= 28.5), its value
// 2 + 4 l (31 for level 7).
template <class D>
void BoundCodes(D d, const float* m, float d_scale, CodeBounds& cb) {
  const std::size_t N = hn::Lanes(d);
  HWY_ALIGN float inv[16];
  for (unsigned code = 0; code < 16; ++code) {
    cb.db[code] = e8::code_scale(d_scale, code);
    inv[code] = 1.0f / cb.db[code];
  }
  const auto quarter = hn::Set(d, 0.25f), six = hn::Set(d, 6.0f), four = hn::Set(d, 4.0f),
             two = hn::Set(d, 2.0f), top = hn::Set(d, 28.5f), top_value = hn::Set(d, 31.0f);
  for (std::size_t c = 0; c < 16; c += N) {
    const auto vdb = hn::LoadU(d, cb.db.data() + c), vinv = hn::Load(d, inv + c);
    auto acc = hn::Zero(d);
    for (std::size_t i = 0; i < 32; ++i) {
      const auto mv = hn::Set(d, m[i]);
      const auto q = hn::Mul(mv, vinv);
      const auto lower = hn::Min(hn::Floor(hn::Mul(q, quarter)), six);
      const auto value =
          hn::IfThenElse(hn::Ge(q, top), top_value, hn::Add(hn::Mul(lower, four), two));
      const auto e = hn::Sub(mv, hn::Mul(vdb, value));
      acc = hn::Add(acc, hn::Mul(e, e));
    }
    hn::StoreU(acc, d, cb.bound.data() + c);
  }
}

// Code `code`'s level of each weight, for its search.
template <class D>
void LevelsOf(D d, const float* m, unsigned code, CodeBounds& cb) {
  const std::size_t N = hn::Lanes(d);
  const hn::RebindToSigned<D> di;
  const auto quarter = hn::Set(d, 0.25f), six = hn::Set(d, 6.0f), top = hn::Set(d, 28.5f);
  const auto one = hn::Set(di, 1);
  const auto inv = hn::Set(d, 1.0f / cb.db[code]);
  for (std::size_t i = 0; i < 32; i += N) {
    const auto q = hn::Mul(hn::LoadU(d, m + i), inv);
    const auto lower = hn::Min(hn::Floor(hn::Mul(q, quarter)), six);
    const auto high = hn::RebindMask(di, hn::Ge(q, top));
    hn::Store(hn::Add(hn::ConvertTo(di, lower), hn::IfThenElseZero(high, one)), di,
              cb.level.data() + i);
  }
}

// The reference's nearest entries for groups [g0, g0 + kBatch) of a sub-block under scale db,
// each among its cell's candidates: the first least (db * |g|^2) + (-2 * m.g), with m.g as the
// reference BLAS sums it. Each lane keeps the first least of the list positions it sees; the
// answer is the lowest position among the lanes holding the least. The groups go stage by
// stage together, so their independent work overlaps (one group's search is a long chain).
constexpr unsigned kBatch = 8;

template <class D>
HWY_INLINE void NearestInLists(D d, const e8::CellLists& lists, const float* m, float db,
                               const std::int32_t* levels, unsigned g0, std::uint8_t* idx) {
  constexpr std::size_t kChunk = e8::kChunk;
  const std::size_t N = hn::Lanes(d);
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::int8_t, D> d8;
  using V = hn::Vec<D>;
  using VI = hn::Vec<decltype(di)>;
  const auto vdb = hn::Set(d, db), minus2 = hn::Set(d, -2.0f);
  const auto coord = [&](const std::int8_t* p) {
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, p)));
  };
  const auto criterion = [&](unsigned g, const e8::Chunk& c, std::size_t lane) {
    const float* gm = m + 4 * g;
    auto a = hn::Mul(hn::Set(d, gm[0]), coord(c.g[0] + lane));
    a = hn::Add(a, hn::Mul(hn::Set(d, gm[1]), coord(c.g[1] + lane)));
    a = hn::Add(a, hn::Mul(hn::Set(d, gm[2]), coord(c.g[2] + lane)));
    a = hn::Add(a, hn::Mul(hn::Set(d, gm[3]), coord(c.g[3] + lane)));
    return hn::Add(hn::Mul(vdb, hn::LoadU(d, c.g2 + lane)), hn::Mul(minus2, a));
  };
  e8::CellList list[kBatch];
  for (unsigned k = 0; k < kBatch; ++k) {
    const std::int32_t* l = levels + 4 * (g0 + k);
    list[k] = lists.list(e8::cell_of(l));
  }
  V best[kBatch];
  VI pos[kBatch];
  for (unsigned k = 0; k < kBatch; ++k) {
    best[k] = criterion(g0 + k, list[k].chunk[0], 0);
    pos[k] = hn::Iota(di, 0);
  }
  for (unsigned k = 0; k < kBatch; ++k) {
    auto at = hn::Iota(di, 0);
    for (std::size_t j = N; j < list[k].chunks * kChunk; j += N) {
      at = hn::Add(at, hn::Set(di, static_cast<std::int32_t>(N)));
      const auto crit = criterion(g0 + k, list[k].chunk[j / kChunk], j % kChunk);
      const auto lt = hn::Lt(crit, best[k]);
      best[k] = hn::IfThenElse(lt, crit, best[k]);
      pos[k] = hn::IfThenElse(hn::RebindMask(di, lt), at, pos[k]);
    }
  }
  const auto big = hn::Set(di, std::numeric_limits<std::int32_t>::max());
  for (unsigned k = 0; k < kBatch; ++k) {
    const auto least = hn::Eq(best[k], hn::MinOfLanes(d, best[k]));
    const auto p = static_cast<std::size_t>(
        hn::GetLane(hn::MinOfLanes(di, hn::IfThenElse(hn::RebindMask(di, least), pos[k], big))));
    idx[g0 + k] = list[k].chunk[p / kChunk].index[p % kChunk];
  }
}

// One code's indices and its error, exactly as the reference sums it.
template <class D>
float CodeError(D d, const Tables& t, const float* m, const SubBlock& sb, CodeBounds& cb,
                unsigned code, std::uint8_t idx[8]) {
  LevelsOf(d, m, code, cb);
  const float db = cb.db[code];
  float terms[8];
  for (unsigned g0 = 0; g0 < 8; g0 += kBatch) {
    for (unsigned grp = g0; grp < g0 + kBatch; ++grp) {
      QR_CHECK(e8::margin_holds(sb.group_sums[grp], db), "e8: sum(m) / db beyond its bound");
    }
    NearestInLists(d, t.lists, m, db, cb.level.data(), g0, idx);
  }
  for (unsigned grp = 0; grp < 8; ++grp) {
    terms[grp] =
        e8::group_term(db, t.grid.g2[idx[grp]], e8::dot_blas(m + 4 * grp, t.grid, idx[grp]));
  }
  return e8::sum_of_eight(terms);
}

// What rounding may move a code's error or its bound by, in all (docs/formats/e8-iq3.md,
// "Pruned search"): 2^-16 of |m|^2 + bound + (8 * 3844 db^2 + 62 db sum(m)).
double Slack(const SubBlock& sb, const CodeBounds& cb, unsigned c) {
  const double db = cb.db[c];
  return (sb.m2 + cb.bound[c] + 8 * 3844 * db * db + 62 * db * sb.m_sum) / 65536;
}

// Sub-block ib: the code of least bound first, then every other one its bound does not rule out.
template <class D>
void EncodeSubBlock(D d, const Tables& t, const e8::Prepared& p, unsigned ib, std::uint8_t* out) {
  const float* m = p.mag.data() + ib * 32;
  CodeBounds cb;
  BoundCodes(d, m, p.d, cb);
  SubBlock sb;
  for (unsigned grp = 0; grp < 8; ++grp) {
    const float* gm = m + 4 * grp;
    sb.group_sums[grp] = ((gm[0] + gm[1]) + gm[2]) + gm[3];
    for (unsigned k = 0; k < 4; ++k) {
      sb.m2 += static_cast<double>(gm[k]) * gm[k];
      sb.m_sum += gm[k];
    }
  }
  unsigned first = 0;
  for (unsigned c = 1; c < 16; ++c) {
    if (cb.bound[c] < cb.bound[first]) first = c;
  }
  std::uint8_t best_idx[8];
  float best_err = CodeError(d, t, m, sb, cb, first, best_idx);
  unsigned best_code = first;
  for (unsigned c = 0; c < 16; ++c) {
    if (c == first) continue;
    if (cb.bound[c] - sb.m2 - Slack(sb, cb, c) > best_err) continue;
    std::uint8_t idx[8];
    const float err = CodeError(d, t, m, sb, cb, c, idx);
    if (err < best_err || (err == best_err && c < best_code)) {
      best_err = err;
      best_code = c;
      std::memcpy(best_idx, idx, 8);
    }
  }
  e8::pack_sub_block(p, ib, best_idx, best_code, out);
}

// The rotation of one block of b (a power of two) in place, as e8_rotate_row: signs, the
// butterflies h = 1, 2, ..., b/2 (those within a vector first, lane by lane from the partner
// lane i ^ h; the rest between vectors), then the f32 division by sqrt(b).
template <class D>
void RotateBlock(D d, float* x, std::size_t b) {
  const std::size_t N = hn::Lanes(d);
  const float* sign = e8::rotation_signs(b);
  if (b < N) {  // a block smaller than a vector: the reference's loops
    e8::rotate_block_ref(x, b);
    return;
  }
  const hn::RebindToSigned<D> di;
  const auto lane = hn::Iota(di, 0);
  for (std::size_t i = 0; i < b; i += N) {
    auto v = hn::Mul(hn::LoadU(d, x + i), hn::LoadU(d, sign + i));
    for (std::size_t h = 1; h < N; h <<= 1) {
      const auto bit = hn::Set(di, static_cast<std::int32_t>(h));
      const auto partner = hn::TableLookupLanes(v, hn::IndicesFromVec(d, hn::Xor(lane, bit)));
      const auto upper = hn::RebindMask(d, hn::Ne(hn::And(lane, bit), hn::Zero(di)));
      v = hn::IfThenElse(upper, hn::Sub(partner, v), hn::Add(v, partner));
    }
    hn::StoreU(v, d, x + i);
  }
  for (std::size_t h = N; h < b; h <<= 1) {
    for (std::size_t i = 0; i < b; i += 2 * h) {
      for (std::size_t j = i; j < i + h; j += N) {
        const auto u = hn::LoadU(d, x + j), w = hn::LoadU(d, x + j + h);
        hn::StoreU(hn::Add(u, w), d, x + j);
        hn::StoreU(hn::Sub(u, w), d, x + j + h);
      }
    }
  }
  const auto root = hn::Set(d, std::sqrt(static_cast<float>(b)));
  for (std::size_t i = 0; i < b; i += N) hn::StoreU(hn::Div(hn::LoadU(d, x + i), root), d, x + i);
}

void E8RotateRow(float* row, std::size_t n) {
  const hn::ScalableTag<float> d;
  for (std::size_t off = 0; off < n;) {
    const std::size_t b = e8::rotation_block(n - off);
    RotateBlock(d, row + off, b);
    off += b;
  }
}

// prepare_block with vectors: magnitudes and signs, the squares summed as numpy's pairwise sum
// does (each half of 128 in eight running sums over consecutive eights, combined as
// ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))), then the reference's parity fix.
bool PrepareBlock(const float* x, e8::Prepared& p) {
  const hn::CappedTag<float, 8> d;
  const std::size_t N = hn::Lanes(d);
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<std::uint8_t, decltype(d)> d8;
  const auto zero = hn::Zero(d);
  const auto one = hn::Set(di, 1);
  float half_sums[2];
  for (std::size_t h = 0; h < 2; ++h) {
    HWY_ALIGN float r[8];
    for (std::size_t j = 0; j < 8; j += N) {
      auto acc = hn::Zero(d);
      for (std::size_t i = 128 * h + j; i < 128 * (h + 1); i += 8) {
        const auto v = hn::LoadU(d, x + i);
        const auto m = hn::Abs(v);
        hn::StoreU(m, d, p.mag.data() + i);
        const auto neg = hn::IfThenElseZero(hn::RebindMask(di, hn::Lt(v, zero)), one);
        hn::StoreU(hn::DemoteTo(d8, neg), d8, p.neg.data() + i);
        acc = i == 128 * h + j ? hn::Mul(m, m) : hn::Add(acc, hn::Mul(m, m));
      }
      hn::Store(acc, d, r + j);
    }
    half_sums[h] = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  }
  e8::fix_parity(p);
  return e8::set_scale(half_sums[0] + half_sums[1], p);
}

bool E8EncodeRow(const float* rotated, std::size_t n, std::uint8_t* out) {
  const hn::ScalableTag<float> d;
  const Tables t{e8::cell_lists(), e8::ref_grid()};
  e8::Prepared p;
  for (std::size_t b = 0; b < n / 256; ++b) {
    std::uint8_t* o = out + b * 98;
    if (!PrepareBlock(rotated + b * 256, p)) return false;
    if (p.d_bits == 0) {  // every scale is the 1e-20 floor: the reference's search as it is
      e8::encode_block_ref(p, o);
    } else {
      for (unsigned ib = 0; ib < 8; ++ib) EncodeSubBlock(d, t, p, ib, o);
    }
    e8::store_scale(p, o);
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qrepack::kernels {

HWY_EXPORT(E8EncodeRow);
HWY_EXPORT(E8RotateRow);

void e8_rotate_row(float* row, std::size_t n) { HWY_DYNAMIC_DISPATCH(E8RotateRow)(row, n); }

bool e8_encode_row(const float* rotated, std::size_t n, std::uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(E8EncodeRow)(rotated, n, out);
}

}  // namespace qrepack::kernels
#endif
