// E8/IQ3 (fmt 6) against the independent numpy derivation (tests/python/e8_iq3.py) on rows
// built to reach every rule of the reference encoder: ties of the parity fix, -0.0, exact
// zeros, all-zero blocks (the 1e-20 floor), fp16-subnormal super-scales, coarse dyadic values
// (exact criterion ties), heavy tails and outliers; the scalar reference and the SIMD kernel on
// every target the machine runs, byte for byte; decoding and the inverse rotation.
#include "qrepack/schemes/e8_iq3.h"

#include <gtest/gtest.h>
#include <hwy/tests/hwy_gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/sha256.h"
#include "kernels/kernels.h"
#include "schemes/e8_grid.h"
#include "test_util.h"

namespace qrepack {
namespace {

constexpr std::size_t kCols = 768;  // rotation blocks 256 + 512

double normal(SplitMix64& rng) { return rng.normal(); }

// Rows of every kind the rules need, kCols each.
std::vector<float> test_rows() {
  SplitMix64 rng(20261205);
  std::vector<float> rows;
  const auto add_row = [&](auto value) {
    for (std::size_t c = 0; c < kCols; ++c) rows.push_back(static_cast<float>(value(c)));
  };
  for (double scale : {1e-3, 0.02, 1.0, 300.0})
    add_row([&](std::size_t) { return scale * normal(rng); });
  for (double rms : {1e-6, 3e-7, 1e-7, 2e-8})
    add_row([&](std::size_t) { return rms * normal(rng); });
  add_row([](std::size_t) { return 0.0; });
  add_row([](std::size_t c) { return c % 3 == 0 ? -0.0 : 0.0; });
  // coarse dyadic values: many equal magnitudes and exactly tied criteria
  add_row(
      [&](std::size_t) { return static_cast<double>(static_cast<int>(rng.next() % 9) - 4) / 8; });
  add_row([&](std::size_t) { return static_cast<double>(static_cast<int>(rng.next() % 3) - 1); });
  add_row([](std::size_t c) { return (c % 5 == 0 ? -1.0 : 1.0) * 0.25; });
  // heavy tails and lone outliers
  add_row([&](std::size_t) {
    const double n = normal(rng);
    return 0.01 * n * n * n;
  });
  add_row([&](std::size_t c) { return c % 97 == 0 ? 40.0 : 0.01 * normal(rng); });
  add_row([&](std::size_t c) { return c == 5 ? 1e4 : 1e-3 * normal(rng); });
  return rows;
}

// The derivation's bytes and rotated rows for test_rows(), computed once.
struct Derivation {
  std::vector<float> rows;
  std::vector<std::uint8_t> packed;
  std::vector<float> rotated;
  std::size_t count = 0;
};

const Derivation& derivation() {
  static const Derivation d = [] {
    Derivation out;
    out.rows = test_rows();
    out.count = out.rows.size() / kCols;
    testing::TempDir dir;
    std::vector<std::uint8_t> in(16 + out.rows.size() * 4);
    const std::int64_t dims[2] = {static_cast<std::int64_t>(out.count),
                                  static_cast<std::int64_t>(kCols)};
    std::memcpy(in.data(), dims, 16);
    std::memcpy(in.data() + 16, out.rows.data(), out.rows.size() * 4);
    testing::write_bytes(dir / "in", in);
    EXPECT_EQ(testing::run_test_python("e8_iq3.py",
                                       {"encode", (dir / "in").string(), (dir / "out").string()}),
              0);
    const auto bytes = testing::read_bytes(dir / "out");
    const std::size_t packed = out.count * e8_row_bytes(kCols);
    EXPECT_EQ(bytes.size(), packed + out.rows.size() * 4);
    if (bytes.size() != packed + out.rows.size() * 4) return out;
    out.packed.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(packed));
    out.rotated.resize(out.rows.size());
    std::memcpy(out.rotated.data(), bytes.data() + packed, out.rows.size() * 4);
    return out;
  }();
  return d;
}

TEST(E8Iq3, CodebookIsThePublishedGrid) {
  std::vector<std::uint8_t> bytes;
  for (std::uint32_t w : e8::kGridPacked) {
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<std::uint8_t>(w >> (8 * k)));
  }
  // SHA-256 of the engine converter's iq3xxs_grid.json as 256 x 4 bytes
  EXPECT_EQ(sha256_hex(bytes), "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d");
  float g[4];
  e8_grid_entry(0, g);
  EXPECT_EQ(g[0], 2.0f);
  e8_grid_entry(5, g);  // 0x04040c3e
  EXPECT_EQ(g[0], 31.0f);
  EXPECT_EQ(g[1], 6.0f);
}

// Every derivation row through `rotate` (in place) then `encode` (false: refused): the rotated
// floats and the bytes must be the derivation's.
template <class Rotate, class Encode>
void expect_rows_match_derivation(const Rotate& rotate, const Encode& encode) {
  const Derivation& d = derivation();
  ASSERT_FALSE(d.packed.empty());
  const std::size_t rb = e8_row_bytes(kCols);
  for (std::size_t r = 0; r < d.count; ++r) {
    std::vector<float> row(d.rows.begin() + static_cast<std::ptrdiff_t>(r * kCols),
                           d.rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * kCols));
    rotate(row);
    ASSERT_EQ(0, std::memcmp(row.data(), d.rotated.data() + r * kCols, kCols * 4)) << "row " << r;
    std::vector<std::uint8_t> out(rb);
    ASSERT_TRUE(encode(row, out));
    EXPECT_EQ(0, std::memcmp(out.data(), d.packed.data() + r * rb, rb)) << "row " << r;
  }
}

TEST(E8Iq3, ReferenceMatchesTheDerivation) {
  expect_rows_match_derivation([](std::vector<float>& row) { e8_rotate_row(row); },
                               [](const std::vector<float>& row, std::vector<std::uint8_t>& out) {
                                 return e8_encode_row_ref(row, out);
                               });
}

// Worked example of docs/formats/e8-iq3.md: 256 ones (already rotated).
TEST(E8Iq3, WorkedExampleOfTheSpec) {
  std::vector<float> ones(256, 1.0f);
  std::vector<std::uint8_t> out(98);
  ASSERT_TRUE(e8_encode_row_ref(ones, out));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], 0x47) << i;
  for (int i = 64; i < 96; ++i)
    EXPECT_EQ(out[static_cast<std::size_t>(i)], i % 4 == 3 ? 0x60 : 0) << i;
  EXPECT_EQ(out[96], 0x66);  // fp16 0x2A66 = 0.04998779296875
  EXPECT_EQ(out[97], 0x2A);
  std::vector<float> back(256);
  e8_decode_row(out, back);
  // 0.04998779296875 * 6.5 * 0.5 * 6
  for (float v : back) EXPECT_EQ(v, 0.974761962890625f);
}

TEST(E8Iq3, DecodeAndInverseRotationRecoverTheRow) {
  const Derivation& d = derivation();
  ASSERT_FALSE(d.packed.empty());
  const std::size_t rb = e8_row_bytes(kCols);
  for (std::size_t r = 0; r < 4; ++r) {  // the Gaussian rows
    std::vector<float> back(kCols);
    e8_decode_row(std::span(d.packed).subspan(r * rb, rb), back);
    double num = 0, den = 0;
    for (std::size_t c = 0; c < kCols; ++c) {
      const double e = back[c] - d.rotated[r * kCols + c];
      num += e * e;
      den += static_cast<double>(d.rotated[r * kCols + c]) * d.rotated[r * kCols + c];
    }
    EXPECT_LT(num / den, 0.05) << "row " << r;  // about 3 bits per weight
    std::vector<float> row(d.rotated.begin() + static_cast<std::ptrdiff_t>(r * kCols),
                           d.rotated.begin() + static_cast<std::ptrdiff_t>((r + 1) * kCols));
    e8_unrotate_row(row);
    float peak = 0;
    for (std::size_t c = 0; c < kCols; ++c) peak = std::max(peak, std::fabs(d.rows[r * kCols + c]));
    for (std::size_t c = 0; c < kCols; ++c) {
      EXPECT_NEAR(row[c], d.rows[r * kCols + c], 1e-5 * peak) << "row " << r << " col " << c;
    }
  }
}

TEST(E8Iq3, ScaleBeyondHalfPrecisionIsRefused) {
  std::vector<float> row(256, 3e7f);
  std::vector<std::uint8_t> out(98);
  EXPECT_FALSE(e8_encode_row_ref(row, out));
  EXPECT_FALSE(kernels::e8_encode_row(row.data(), row.size(), out.data()));
}

}  // namespace
}  // namespace qrepack

// Per SIMD target (Highway's instantiation names ::testing, which qrepack::testing hides).
namespace {

using qrepack::e8_encode_row_ref;
using qrepack::e8_row_bytes;
using qrepack::expect_rows_match_derivation;
using qrepack::kCols;
using qrepack::normal;
using qrepack::SplitMix64;
namespace kernels = qrepack::kernels;

class E8Kernel : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(E8Kernel);

TEST_P(E8Kernel, RotationAndEncodingMatchTheDerivation) {
  expect_rows_match_derivation(
      [](std::vector<float>& row) { kernels::e8_rotate_row(row.data(), row.size()); },
      [](const std::vector<float>& row, std::vector<std::uint8_t>& out) {
        return kernels::e8_encode_row(row.data(), row.size(), out.data());
      });
}

// Random rows at many scales: the kernel equals the scalar reference.
TEST_P(E8Kernel, RandomRowsMatchTheReference) {
  SplitMix64 rng(GetParam());
  for (int r = 0; r < 24; ++r) {
    const double scale = std::pow(10.0, static_cast<double>(rng.next() % 12) - 8.0);
    std::vector<float> row(512);
    for (float& v : row) v = static_cast<float>(scale * normal(rng));
    std::vector<std::uint8_t> want(e8_row_bytes(512)), got(want.size());
    ASSERT_TRUE(e8_encode_row_ref(row, want));
    ASSERT_TRUE(kernels::e8_encode_row(row.data(), row.size(), got.data()));
    EXPECT_EQ(want, got) << "row " << r << " scale " << scale;
  }
}

}  // namespace
