// The scalar reference of E8/IQ3 (fmt 6). Every f32 operation is the reference encoder's, in its
// order: docs/formats/e8-iq3.md names each one. Built with -ffp-contract=off (no fused
// multiply-adds may change a rounding).
#include "qrepack/schemes/e8_iq3.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "qrepack/formats/float16.h"
#include "schemes/e8_grid.h"
#include "schemes/e8_ref.h"

namespace qrepack {
namespace {

using e8::kGridSize;

// The signs of every rotation block size 2^0 .. 2^15 as +-1.0f (bit i of the stream set:
// element i negated).
struct SignTables {
  std::array<std::vector<float>, 16> sign;
  SignTables() {
    for (unsigned p = 0; p < 16; ++p) {
      const std::uint64_t n = std::uint64_t{1} << p;
      sign[p].resize(n);
      std::uint64_t s = 417 + n;
      for (std::uint64_t i = 0; i < (n + 7) / 8; ++i) {  // xorshift64*, the top byte
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        const auto byte = static_cast<std::uint8_t>((s * 2685821657736338717ull) >> 56);
        for (std::uint64_t j = 0; j < 8 && 8 * i + j < n; ++j) {
          sign[p][8 * i + j] = (byte >> j) & 1u ? -1.0f : 1.0f;
        }
      }
    }
  }
};

const SignTables& sign_tables() {
  static const SignTables t;
  return t;
}

// The next rotation block of a row with `rem` columns left: its lowest set bit, capped.
unsigned log2_of(std::uint64_t b) {
  unsigned p = 0;
  while ((std::uint64_t{1} << p) < b) ++p;
  return p;
}

}  // namespace

namespace e8 {

std::uint64_t rotation_block(std::uint64_t rem) {
  std::uint64_t b = rem & (~rem + 1);
  while (b > kE8MaxRotation) b >>= 1;
  return b;
}

const float* rotation_signs(std::uint64_t b) { return sign_tables().sign[log2_of(b)].data(); }

}  // namespace e8

namespace {

void apply_signs(float* x, std::uint64_t b) {
  const float* sign = e8::rotation_signs(b);
  for (std::uint64_t i = 0; i < b; ++i) x[i] = x[i] * sign[i];
}

// The butterflies (u + v, u - v) for h = 1, 2, ..., b/2, then the division by sqrt(b) in f32.
void hadamard(float* x, std::uint64_t b) {
  for (std::uint64_t h = 1; h < b; h <<= 1) {
    for (std::uint64_t i = 0; i < b; i += 2 * h) {
      for (std::uint64_t j = i; j < i + h; ++j) {
        const float u = x[j], v = x[j + h];
        x[j] = u + v;
        x[j + h] = u - v;
      }
    }
  }
  const float root = std::sqrt(static_cast<float>(b));
  for (std::uint64_t i = 0; i < b; ++i) x[i] = x[i] / root;
}

}  // namespace

void e8_grid_entry(unsigned index, float out[4]) {
  QR_CHECK(index < kGridSize, "e8_grid_entry: index");
  for (int k = 0; k < 4; ++k) out[k] = e8::level_value(e8::grid_level(static_cast<int>(index), k));
}

void e8_rotate_row(std::span<float> row) {
  for (std::uint64_t off = 0; off < row.size();) {
    const std::uint64_t b = e8::rotation_block(row.size() - off);
    e8::rotate_block_ref(row.data() + off, b);
    off += b;
  }
}

void e8_unrotate_row(std::span<float> row) {
  for (std::uint64_t off = 0; off < row.size();) {
    const std::uint64_t b = e8::rotation_block(row.size() - off);
    hadamard(row.data() + off, b);
    apply_signs(row.data() + off, b);
    off += b;
  }
}

namespace e8 {

void rotate_block_ref(float* x, std::uint64_t b) {
  apply_signs(x, b);
  hadamard(x, b);
}

const RefGrid& ref_grid() {
  static const RefGrid g = [] {
    RefGrid t{};
    for (int j = 0; j < kGridSize; ++j) {
      float sq = 0.0f;
      for (int k = 0; k < 4; ++k) {
        t.g[k][static_cast<std::size_t>(j)] = level_value(grid_level(j, k));
        sq = sq + t.g[k][static_cast<std::size_t>(j)] * t.g[k][static_cast<std::size_t>(j)];
      }
      t.g2[static_cast<std::size_t>(j)] = sq;  // integers below 2^24: exact in any order
    }
    return t;
  }();
  return g;
}

// numpy's pairwise float32 sum (its reduction along a contiguous axis): eight running sums
// over blocks of eight, combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the
// tail; more than 128 values split in halves rounded down to a multiple of 8 (n is 256 here:
// one split).
float pairwise_sum(const float* a, std::size_t n) {
  if (n < 8) {
    float r = 0.0f;
    for (std::size_t i = 0; i < n; ++i) r = r + a[i];
    return r;
  }
  if (n <= 128) {
    std::array<float, 8> r{};
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 8; i < whole; i += 8) {
      for (std::size_t j = 0; j < 8; ++j) r[j] = r[j] + a[i + j];
    }
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (std::size_t i = whole; i < n; ++i) res = res + a[i];
    return res;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

void fix_parity(Prepared& p) {
  for (std::size_t b = 0; b < kE8Block; b += 8) {  // odd negatives: flip the smallest magnitude
    std::uint64_t flags;
    std::memcpy(&flags, p.neg.data() + b, 8);  // eight 0/1 bytes
    if (std::popcount(flags) % 2 == 0) continue;
    unsigned least = 0;
    for (unsigned j = 1; j < 8; ++j) {
      if (p.mag[b + j] < p.mag[b + least]) least = j;
    }
    p.neg[b + least] ^= 1;
  }
}

bool set_scale(float sum_of_squares, Prepared& p) {
  const float mean = sum_of_squares / 256.0f;
  const float d = std::sqrt(mean) / 20.0f + 1e-12f;
  p.d_bits = f16_encode(d);
  if ((p.d_bits & 0x7C00) == 0x7C00) return false;
  p.d = f16_decode(p.d_bits);
  return true;
}

bool prepare_block(const float* x, Prepared& p) {
  for (std::size_t i = 0; i < kE8Block; ++i) {
    p.neg[i] = x[i] < 0.0f ? 1 : 0;  // -0.0 counts positive
    p.mag[i] = std::fabs(x[i]);
  }
  fix_parity(p);
  std::array<float, kE8Block> sq;
  for (std::size_t i = 0; i < kE8Block; ++i) sq[i] = p.mag[i] * p.mag[i];
  return set_scale(pairwise_sum(sq.data(), kE8Block), p);
}

void pack_sub_block(const Prepared& p, unsigned ib, const std::uint8_t idx[8], unsigned code,
                    std::uint8_t* out) {
  for (unsigned g = 0; g < 8; ++g) out[ib * 8 + g] = idx[g];
  std::uint32_t word = 0;
  for (unsigned l = 0; l < 4; ++l) {
    std::uint32_t seven = 0;
    for (unsigned j = 0; j < 7; ++j) seven |= std::uint32_t{p.neg[ib * 32 + l * 8 + j]} << j;
    word |= seven << (7 * l);
  }
  word |= (code & 0xFu) << 28;
  for (unsigned k = 0; k < 4; ++k)
    out[64 + ib * 4 + k] = static_cast<std::uint8_t>(word >> (8 * k));
}

void store_scale(const Prepared& p, std::uint8_t* out) {
  out[96] = static_cast<std::uint8_t>(p.d_bits & 0xFF);
  out[97] = static_cast<std::uint8_t>(p.d_bits >> 8);
}

namespace {

// The nearest codebook entry of one group of four magnitudes under scale db: the first index
// minimising (db * |g|^2) + (-2 * m.g).
std::uint8_t nearest_ref(const float* a, float db) {
  const RefGrid& g = ref_grid();
  float best = std::numeric_limits<float>::infinity();
  unsigned bi = 0;
  for (unsigned j = 0; j < kGridSize; ++j) {
    const float crit = db * g.g2[j] + -2.0f * a[j];
    if (crit < best) {
      best = crit;
      bi = j;
    }
  }
  return static_cast<std::uint8_t>(bi);
}

}  // namespace

void encode_block_ref(const Prepared& p, std::uint8_t* out) {
  const RefGrid& g = ref_grid();
  for (unsigned ib = 0; ib < 8; ++ib) {
    const float* m = p.mag.data() + ib * 32;
    std::array<std::array<float, kGridSize>, 8> a;  // m.g of each group and entry
    for (unsigned grp = 0; grp < 8; ++grp) {
      for (unsigned j = 0; j < kGridSize; ++j) a[grp][j] = dot_blas(m + grp * 4, g, j);
    }
    float best_err = 0.0f;
    unsigned best_code = 0;
    std::uint8_t best_idx[8] = {};
    for (unsigned code = 0; code < 16; ++code) {
      const float db = code_scale(p.d, code);
      std::uint8_t idx[8];
      float terms[8];
      for (unsigned grp = 0; grp < 8; ++grp) {
        idx[grp] = nearest_ref(a[grp].data(), db);
        terms[grp] = group_term(db, g.g2[idx[grp]], a[grp][idx[grp]]);
      }
      const float err = sum_of_eight(terms);
      if (code == 0 || err < best_err) {
        best_err = err;
        best_code = code;
        std::memcpy(best_idx, idx, 8);
      }
    }
    pack_sub_block(p, ib, best_idx, best_code, out);
  }
}

}  // namespace e8

bool e8_encode_row_ref(std::span<const float> rotated, std::span<std::uint8_t> out) {
  QR_CHECK(rotated.size() % kE8Block == 0, "e8_encode_row_ref: columns");
  QR_CHECK(out.size() == e8_row_bytes(rotated.size()), "e8_encode_row_ref: out size");
  e8::Prepared p;
  for (std::size_t b = 0; b < rotated.size() / kE8Block; ++b) {
    const float* x = rotated.data() + b * kE8Block;
    std::uint8_t* o = out.data() + b * kE8BlockBytes;
    if (!e8::prepare_block(x, p)) return false;
    e8::encode_block_ref(p, o);
    e8::store_scale(p, o);
  }
  return true;
}

void e8_decode_row(std::span<const std::uint8_t> packed, std::span<float> out) {
  QR_CHECK(out.size() % kE8Block == 0, "e8_decode_row: columns");
  QR_CHECK(packed.size() == e8_row_bytes(out.size()), "e8_decode_row: packed size");
  const e8::RefGrid& g = e8::ref_grid();
  for (std::size_t b = 0; b < out.size() / kE8Block; ++b) {
    const std::uint8_t* blk = packed.data() + b * kE8BlockBytes;
    float* o = out.data() + b * kE8Block;
    const float d = f16_decode(static_cast<std::uint16_t>(blk[96] | (blk[97] << 8)));
    for (unsigned ib = 0; ib < 8; ++ib) {
      std::uint32_t word = 0;
      for (unsigned k = 0; k < 4; ++k) word |= std::uint32_t{blk[64 + ib * 4 + k]} << (8 * k);
      const float db = d * (0.5f + static_cast<float>(word >> 28)) * 0.5f;
      for (unsigned l = 0; l < 4; ++l) {
        const std::uint32_t seven = (word >> (7 * l)) & 0x7Fu;
        unsigned parity = 0;
        for (unsigned j = 0; j < 8; ++j) {
          const unsigned e = ib * 32 + l * 8 + j;
          const std::size_t entry = blk[e / 4];
          const unsigned neg = j < 7 ? (seven >> j) & 1u : parity;
          parity ^= neg;
          const float v = g.g[e % 4][entry] * db;
          o[e] = neg ? -v : v;
        }
      }
    }
  }
}

}  // namespace qrepack
