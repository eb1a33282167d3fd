// E8/IQ3 (fmt 6) on one thread: the SIMD rotate + encode and the scalar reference of the same
// rows, in weights per second, on GLM-5.2's expert row width (6144: rotation blocks 2048 + 4096).
// Rows are Gaussian like rotated expert weights; the candidate lists are built before timing.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/kernels.h"
#include "qrepack/core/prng.h"
#include "qrepack/schemes/e8_iq3.h"

namespace {

using namespace qrepack;

constexpr std::size_t kE8Cols = 6144;

std::vector<float> expert_rows(std::size_t rows) {
  SplitMix64 rng(11);
  std::vector<float> v(rows * kE8Cols);
  for (auto& x : v) x = static_cast<float>(rng.normal() * 0.02);
  return v;
}

void BM_E8RotateEncode(benchmark::State& state) {
  constexpr std::size_t kRows = 64;
  const auto w = expert_rows(kRows);
  std::vector<float> row(kE8Cols);
  std::vector<std::uint8_t> out(kRows * e8_row_bytes(kE8Cols));
  for (int warm = 0; warm < 2; ++warm) {  // every cell list the rows touch, built once
    for (std::size_t r = 0; r < kRows; ++r) {
      row.assign(w.begin() + static_cast<std::ptrdiff_t>(r * kE8Cols),
                 w.begin() + static_cast<std::ptrdiff_t>((r + 1) * kE8Cols));
      kernels::e8_rotate_row(row.data(), kE8Cols);
      kernels::e8_encode_row(row.data(), kE8Cols, out.data() + r * e8_row_bytes(kE8Cols));
    }
  }
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      row.assign(w.begin() + static_cast<std::ptrdiff_t>(r * kE8Cols),
                 w.begin() + static_cast<std::ptrdiff_t>((r + 1) * kE8Cols));
      kernels::e8_rotate_row(row.data(), kE8Cols);
      kernels::e8_encode_row(row.data(), kE8Cols, out.data() + r * e8_row_bytes(kE8Cols));
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRows * kE8Cols));
}
BENCHMARK(BM_E8RotateEncode);

void BM_E8RotateEncode_Scalar(benchmark::State& state) {
  constexpr std::size_t kRows = 2;
  const auto w = expert_rows(kRows);
  std::vector<float> row(kE8Cols);
  std::vector<std::uint8_t> out(kRows * e8_row_bytes(kE8Cols));
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      row.assign(w.begin() + static_cast<std::ptrdiff_t>(r * kE8Cols),
                 w.begin() + static_cast<std::ptrdiff_t>((r + 1) * kE8Cols));
      e8_rotate_row(row);
      e8_encode_row_ref(row,
                        std::span(out).subspan(r * e8_row_bytes(kE8Cols), e8_row_bytes(kE8Cols)));
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRows * kE8Cols));
}
BENCHMARK(BM_E8RotateEncode_Scalar);

}  // namespace
