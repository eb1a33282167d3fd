// ggml's type table and reference dequantizers (include/qrepack/formats/ggml_quants.h). Each
// decoder evaluates ggml-quants.c's expressions in their order, in f32, one rounding per
// operation (this file is compiled with -ffp-contract=off).
#include "qrepack/formats/ggml_quants.h"

#include <array>
#include <bit>
#include <cstring>

#include "qrepack/formats/float16.h"
#include "schemes/e8_grid.h"

namespace qrepack {
namespace {

// ggml.c type_traits (blck_size, type_size); ids 4, 5, 31-33 and 36-38 were removed upstream.
// Q8_1 and Q8_K are dot-product intermediates ggml itself has no to_float for: never decoded.
constexpr std::array kTypes = {
    GgmlTypeInfo{0, "F32", 1, 4, true},          GgmlTypeInfo{1, "F16", 1, 2, true},
    GgmlTypeInfo{2, "Q4_0", 32, 18, true},       GgmlTypeInfo{3, "Q4_1", 32, 20, true},
    GgmlTypeInfo{6, "Q5_0", 32, 22, true},       GgmlTypeInfo{7, "Q5_1", 32, 24, true},
    GgmlTypeInfo{8, "Q8_0", 32, 34, true},       GgmlTypeInfo{9, "Q8_1", 32, 36, false},
    GgmlTypeInfo{10, "Q2_K", 256, 84, true},     GgmlTypeInfo{11, "Q3_K", 256, 110, true},
    GgmlTypeInfo{12, "Q4_K", 256, 144, true},    GgmlTypeInfo{13, "Q5_K", 256, 176, true},
    GgmlTypeInfo{14, "Q6_K", 256, 210, true},    GgmlTypeInfo{15, "Q8_K", 256, 292, false},
    GgmlTypeInfo{16, "IQ2_XXS", 256, 66, false}, GgmlTypeInfo{17, "IQ2_XS", 256, 74, false},
    GgmlTypeInfo{18, "IQ3_XXS", 256, 98, true},  GgmlTypeInfo{19, "IQ1_S", 256, 50, false},
    GgmlTypeInfo{20, "IQ4_NL", 32, 18, true},    GgmlTypeInfo{21, "IQ3_S", 256, 110, false},
    GgmlTypeInfo{22, "IQ2_S", 256, 82, false},   GgmlTypeInfo{23, "IQ4_XS", 256, 136, true},
    GgmlTypeInfo{24, "I8", 1, 1, false},         GgmlTypeInfo{25, "I16", 1, 2, false},
    GgmlTypeInfo{26, "I32", 1, 4, false},        GgmlTypeInfo{27, "I64", 1, 8, false},
    GgmlTypeInfo{28, "F64", 1, 8, false},        GgmlTypeInfo{29, "IQ1_M", 256, 56, false},
    GgmlTypeInfo{30, "BF16", 1, 2, true},        GgmlTypeInfo{34, "TQ1_0", 256, 54, true},
    GgmlTypeInfo{35, "TQ2_0", 256, 66, true},    GgmlTypeInfo{39, "MXFP4", 32, 17, true},
};

constexpr bool ids_ascending() {
  for (std::size_t i = 1; i < kTypes.size(); ++i) {
    if (kTypes[i].id <= kTypes[i - 1].id) return false;
  }
  return true;
}
static_assert(ids_ascending(), "kTypes rows must be in id order");

constexpr int kQK = 256;

float half(const std::uint8_t* p) {
  return f16_decode(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
}

// block_q4_0: d, qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
void q4_0(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// block_q8_0: d, qs[32] int8.
void q8_0(const std::uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<std::int8_t>(b[2 + j]) * d;
}

// block_q2_K: scales[16], qs[64], d, dmin.
void q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* q = b + 16;
  const float d = half(b + 80);
  const float min = half(b + 82);
  int is = 0;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half_group = 0; half_group < 2; ++half_group) {
        const std::uint8_t sc = scales[is++];
        const float dl = d * (sc & 0xF);
        const float ml = min * (sc >> 4);
        const std::uint8_t* qq = q + 16 * half_group;
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<std::int8_t>((qq[l] >> shift) & 3) - ml;
        }
      }
      shift += 2;
    }
    q += 32;
  }
}

// The sixteen 6-bit Q3_K scales packed in 12 bytes, unpacked as ggml's kmask shuffle does on
// three little-endian u32 words.
std::array<std::int8_t, 16> q3_k_scales(const std::uint8_t* s) {
  constexpr std::uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  std::uint32_t aux[4];
  for (int w = 0; w < 3; ++w) {
    aux[w] = static_cast<std::uint32_t>(s[4 * w]) | static_cast<std::uint32_t>(s[4 * w + 1]) << 8 |
             static_cast<std::uint32_t>(s[4 * w + 2]) << 16 |
             static_cast<std::uint32_t>(s[4 * w + 3]) << 24;
  }
  const std::uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::array<std::int8_t, 16> out{};
  for (int i = 0; i < 16; ++i) {
    out[i] = static_cast<std::int8_t>((aux[i / 4] >> (8 * (i % 4))) & 0xFF);
  }
  return out;
}

// block_q3_K: hmask[32], qs[64], scales[12], d.
void q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hm = b;
  const std::uint8_t* q = b + 32;
  const std::array<std::int8_t, 16> scales = q3_k_scales(b + 96);
  const float d_all = half(b + 108);
  std::uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int code = static_cast<std::int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(code);
        }
      }
      shift += 2;
      m = static_cast<std::uint8_t>(m << 1);
    }
    q += 32;
  }
}

// block_q6_K: ql[128], qh[64], scales[16] int8, d.
void q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const std::int8_t* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int n = 0; n < kQK; n += 128) {
    // ggml's d * sc[is] * q, the product d * sc first: taken once per 16 elements, the loops
    // below have no index arithmetic left and vectorize.
    float ds[8];
    for (int k = 0; k < 8; ++k) ds[k] = d * static_cast<float>(sc[k]);
    for (int half_group = 0; half_group < 2; ++half_group) {
      const float d1 = ds[half_group], d2 = ds[half_group + 2], d3 = ds[half_group + 4],
                  d4 = ds[half_group + 6];
      for (int l = 16 * half_group; l < 16 * half_group + 16; ++l) {
        const int lo0 = ql[l] & 0xF, lo1 = ql[l + 32] & 0xF, hi0 = ql[l] >> 4,
                  hi1 = ql[l + 32] >> 4, h = qh[l];
        y[l] = d1 * static_cast<float>((lo0 | (h & 3) << 4) - 32);
        y[l + 32] = d2 * static_cast<float>((lo1 | ((h >> 2) & 3) << 4) - 32);
        y[l + 64] = d3 * static_cast<float>((hi0 | ((h >> 4) & 3) << 4) - 32);
        y[l + 96] = d4 * static_cast<float>((hi1 | ((h >> 6) & 3) << 4) - 32);
      }
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// block_q4_1: d, m, qs[16]; x = q * d + m.
void q4_1(const std::uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const std::uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 / Q5_1's fifth bits: element j's in bit j of the little-endian u32 qh.
std::uint32_t q5_high(const std::uint8_t* qh) {
  return static_cast<std::uint32_t>(qh[0]) | static_cast<std::uint32_t>(qh[1]) << 8 |
         static_cast<std::uint32_t>(qh[2]) << 16 | static_cast<std::uint32_t>(qh[3]) << 24;
}

// block_q5_0: d, qh[4], qs[16]; x = (q | high << 4) - 16, times d.
void q5_0(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint32_t qh = q5_high(b + 2);
  const std::uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// block_q5_1: d, m, qh[4], qs[16]; x = (q | high << 4) * d + m.
void q5_1(const std::uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const std::uint32_t qh = q5_high(b + 4);
  const std::uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10));
    const int x1 = static_cast<int>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

// The j-th (of eight) 6-bit scale and min of a Q4_K / Q5_K block's scales[12]: j < 4 from the
// low six bits of bytes j and j + 4; else the low / high nibble of byte j + 4 with the top two
// bits of bytes j - 4 / j as bits 4-5 (ggml's get_scale_min_k4).
std::pair<int, int> scale_min_k4(int j, const std::uint8_t* q) {
  if (j < 4) return {q[j] & 63, q[j + 4] & 63};
  return {(q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)};
}

// block_q4_K: d, dmin, scales[12], qs[128]; 64 elements per pair of sub-blocks: the low
// nibbles of 32 bytes, then their high nibbles; x = (d * sc) * q - dmin * m.
void q4_k(const std::uint8_t* b, float* y) {
  const float d = half(b), min = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    const auto [sc1, m1i] = scale_min_k4(is, scales);
    const auto [sc2, m2i] = scale_min_k4(is + 1, scales);
    const float d1 = d * static_cast<float>(sc1), m1 = min * static_cast<float>(m1i);
    const float d2 = d * static_cast<float>(sc2), m2 = min * static_cast<float>(m2i);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// block_q5_K: d, dmin, scales[12], qh[32], qs[128]; as Q4_K with a fifth bit (16) from qh:
// bit 2p of qh[l] for the low nibbles of pair p, bit 2p + 1 for the high ones.
void q5_k(const std::uint8_t* b, float* y) {
  const float d = half(b), min = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* ql = b + 48;
  int u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    const auto [sc1, m1i] = scale_min_k4(is, scales);
    const auto [sc2, m2i] = scale_min_k4(is + 1, scales);
    const float d1 = d * static_cast<float>(sc1), m1 = min * static_cast<float>(m1i);
    const float d2 = d * static_cast<float>(sc2), m2 = min * static_cast<float>(m2i);
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// ggml's kvalues_iq4nl: the sixteen non-linear 4-bit levels of IQ4_NL / IQ4_XS.
constexpr std::array<std::int8_t, 16> kIq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                1,    13,   25,  38,  53,  69,  89,  113};

// block_iq4_nl: d, qs[16]; x = d * level[nibble], low nibbles first half.
void iq4_nl(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nl[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4nl[qs[j] >> 4]);
  }
}

// block_iq4_xs: d, scales_h (u16), scales_l[4], qs[128]; sub-block ib of 32 has the 6-bit
// scale ls = nibble ib of scales_l | bits 2ib..2ib+1 of scales_h << 4, and x = (d * (ls - 32))
// * level[nibble].
void iq4_xs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const int scales_h = b[2] | (b[3] << 8);
  const std::uint8_t* scales_l = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4nl[qs[j] & 0xF]);
      y[j + 16] = dl * static_cast<float>(kIq4nl[qs[j] >> 4]);
    }
  }
}

// ggml's kvalues_mxfp4: the E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives).
constexpr std::array<std::int8_t, 16> kMxfp4 = {0, 1,  2,  3,  4,  6,  8,  12,
                                                0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 scale 2^(e - 127): 2^(e - 128) as f32 bits (subnormal for e < 2; e = 255 is
// 2^127, not NaN, as ggml's GGML_E8M0_TO_FP32_HALF).
float e8m0_half(std::uint8_t e) {
  const std::uint32_t bits =
      e < 2 ? std::uint32_t{0x00200000} << e : static_cast<std::uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// block_mxfp4: e (E8M0), qs[16]; x = doubled_level[nibble] * 2^(e - 128).
void mxfp4(const std::uint8_t* b, float* y) {
  const float d = e8m0_half(b[0]);
  const std::uint8_t* qs = b + 1;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kMxfp4[qs[j] & 0x0F]) * d;
    y[j + 16] = static_cast<float>(kMxfp4[qs[j] >> 4]) * d;
  }
}

// One base-3 digit of a TQ1_0 byte: the byte times 3^n keeps the digits below n in its high
// part (mod 256), and (q * 3) >> 8 reads the top one: 0, 1 or 2, i.e. -1, 0, +1.
float trit(std::uint8_t byte, int n, float d) {
  constexpr std::array<std::uint8_t, 6> kPow3 = {1, 3, 9, 27, 81, 243};
  const auto q = static_cast<std::uint8_t>(byte * kPow3[n]);
  const auto xi = static_cast<std::int16_t>((static_cast<std::uint16_t>(q) * 3) >> 8);
  return static_cast<float>(xi - 1) * d;
}

// TQ1_0: qs[48] (five trits a byte: 32 bytes, then 16), qh[4] (four trits a byte), d.
void tq1_0(const std::uint8_t* b, float* y) {
  const std::uint8_t *qs = b, *qh = b + 48;
  const float d = half(b + 52);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) *y++ = trit(qs[m], n, d);
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) *y++ = trit(qs[32 + m], n, d);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *y++ = trit(qh[j], n, d);
  }
}

// TQ2_0: qs[64] (four 2-bit codes a byte, in 32-byte runs per shift), d; x = (q - 1) * d.
void tq2_0(const std::uint8_t* b, float* y) {
  const float d = half(b + 64);
  for (int j = 0; j < 64; j += 32) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) {
        const int q = (b[j + m] >> (2 * l)) & 3;
        *y++ = static_cast<float>(q - 1) * d;
      }
    }
  }
}

// IQ3_XXS: d, qs[64] (one grid index per 4 elements), then per 32 elements a little-endian u32:
// four 7-bit sign indices (bits 7l..7l+6 for elements 8l..8l+7, the eighth sign the parity of
// the seven: ggml's ksigns_iq2xs) and the scale s in the top four bits. x = db * grid[q][j] *
// (-1 when sign bit j is set), db = d * (0.5 + s) * 0.5; the grid is the published IQ3_XXS
// table (schemes/e8_grid.h).
void iq3_xxs(const std::uint8_t* b, float* y) {
  const float d = half(b);
  const std::uint8_t* qs = b + 2;
  const std::uint8_t* words = b + 2 + 64;
  for (int ib = 0; ib < 8; ++ib, qs += 8) {
    const std::uint8_t* w = words + 4 * ib;
    const std::uint32_t aux =
        static_cast<std::uint32_t>(w[0]) | static_cast<std::uint32_t>(w[1]) << 8 |
        static_cast<std::uint32_t>(w[2]) << 16 | static_cast<std::uint32_t>(w[3]) << 24;
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l, y += 8) {
      const std::uint32_t seven = (aux >> (7 * l)) & 127;
      const std::uint32_t signs = seven | static_cast<std::uint32_t>(std::popcount(seven) & 1) << 7;
      const std::uint32_t g1 = e8::kGridPacked[qs[2 * l]], g2 = e8::kGridPacked[qs[2 * l + 1]];
      for (int j = 0; j < 4; ++j) {
        y[j] = db * static_cast<float>((g1 >> (8 * j)) & 0xFF) * ((signs >> j) & 1 ? -1.0f : 1.0f);
        y[j + 4] = db * static_cast<float>((g2 >> (8 * j)) & 0xFF) *
                   ((signs >> (j + 4)) & 1 ? -1.0f : 1.0f);
      }
    }
  }
}

using BlockDecoder = void (*)(const std::uint8_t*, float*);

BlockDecoder block_decoder(std::uint32_t id) {
  switch (id) {
    case kGgmlQ4_0:
      return q4_0;
    case kGgmlQ4_1:
      return q4_1;
    case kGgmlQ5_0:
      return q5_0;
    case kGgmlQ5_1:
      return q5_1;
    case kGgmlQ8_0:
      return q8_0;
    case kGgmlQ2_K:
      return q2_k;
    case kGgmlQ3_K:
      return q3_k;
    case kGgmlQ4_K:
      return q4_k;
    case kGgmlQ5_K:
      return q5_k;
    case kGgmlQ6_K:
      return q6_k;
    case kGgmlIQ3_XXS:
      return iq3_xxs;
    case kGgmlIQ4_NL:
      return iq4_nl;
    case kGgmlIQ4_XS:
      return iq4_xs;
    case kGgmlMXFP4:
      return mxfp4;
    case kGgmlTQ1_0:
      return tq1_0;
    case kGgmlTQ2_0:
      return tq2_0;
    default:
      return nullptr;
  }
}

void scalars(std::uint32_t id, const std::uint8_t* in, std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (id == kGgmlF32) {
      std::memcpy(&out[i], in + 4 * i, 4);
    } else {
      const auto bits = static_cast<std::uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
      out[i] = id == kGgmlF16 ? f16_decode(bits)
                              : std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
    }
  }
}

}  // namespace

std::span<const GgmlTypeInfo> ggml_types() { return kTypes; }

const GgmlTypeInfo* ggml_type_info(std::uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

bool ggml_dequantize_row(std::uint32_t id, std::span<const std::uint8_t> in, std::span<float> out) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  if (!t || !t->decodes || out.size() % t->block != 0 ||
      in.size() != out.size() / t->block * t->block_bytes) {
    return false;
  }
  if (t->block == 1) {
    scalars(id, in.data(), out);
    return true;
  }
  const BlockDecoder block = block_decoder(id);
  if (!block) return false;  // a table row marked decodes without a decoder: none is
  for (std::size_t b = 0; b < out.size() / t->block; ++b) {
    block(in.data() + b * t->block_bytes, out.data() + b * t->block);
  }
  return true;
}

}  // namespace qrepack
