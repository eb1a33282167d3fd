// The SIMD kernels on one thread from warm buffers, in bytes of input per second, with the
// scalar reference of the same job measured in the same run (the *_Scalar entries).
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/kernels.h"
#include "qrepack/core/prng.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/schemes/e0m3_sfb.h"
#include "qrepack/schemes/fp8_block.h"
#include "qrepack/schemes/int_quant.h"

namespace {

using namespace qrepack;

constexpr std::size_t kRows = 128, kCols = 4096;  // one FP8 block row of a 4096-wide weight

std::vector<float> gaussian(std::size_t n, float scale) {
  SplitMix64 rng(7);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.gauss() * scale;
  return v;
}

struct Fp8Block {
  std::vector<std::uint8_t> q;
  std::vector<float> scales;
  Fp8Block() : q(kRows * kCols), scales(kCols / 128) {
    const auto w = gaussian(kRows * kCols, 0.05f);
    fp8_block_encode(w, Fp8BlockShape{kRows, kCols}, q, scales);
  }
};

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// fp8-block dequant + int4-g128 encode: the FP8 convert's inner loop, per row.
void BM_Fp8ToInt4G128(benchmark::State& state) {
  const Fp8Block b;
  std::vector<float> row(kCols), scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      kernels::fp8_decode_scaled(b.q.data() + r * kCols, kCols, b.scales.data(), 128, row.data());
      kernels::int4_encode_row(row.data(), kCols, 128, packed.data() + r * kCols / 2,
                               scales.data());
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols);
}
BENCHMARK(BM_Fp8ToInt4G128);

// The same job fused: decode, abs-max, quantize and pack without an f32 row in memory.
void BM_Fp8ToInt4G128_Fused(benchmark::State& state) {
  const Fp8Block b;
  std::vector<float> scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      kernels::fp8_to_int4_row(b.q.data() + r * kCols, kCols, b.scales.data(), 128, 128,
                               packed.data() + r * kCols / 2, scales.data());
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols);
}
BENCHMARK(BM_Fp8ToInt4G128_Fused);

// The same job as convert runs it: the 128 rows of the block row at once, codes compared with
// per-(block, group maximum) cuts instead of divided.
void BM_Fp8ToInt4G128_Rows(benchmark::State& state) {
  const Fp8Block b;
  std::vector<float> scales(kRows * kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    kernels::fp8_to_int4_rows(b.q.data(), kRows, kCols, b.scales.data(), 128, 128, packed.data(),
                              scales.data());
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols);
}
BENCHMARK(BM_Fp8ToInt4G128_Rows);

// The same bytes as 1024 rows of 512 columns (a routed expert's down projection in the bench
// fixture): what the per-row work costs.
void BM_Fp8ToInt4G128_Fused512(benchmark::State& state) {
  constexpr std::size_t kNarrow = 512, kNarrowRows = kRows * kCols / kNarrow;
  const Fp8Block b;  // its codes, read as narrow rows; every row uses the first block scales
  std::vector<float> scales(kNarrow / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kNarrowRows; ++r) {
      kernels::fp8_to_int4_row(b.q.data() + r * kNarrow, kNarrow, b.scales.data(), 128, 128,
                               packed.data() + r * kNarrow / 2, scales.data());
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols);
}
BENCHMARK(BM_Fp8ToInt4G128_Fused512);

void BM_Fp8ToInt4G128_Scalar(benchmark::State& state) {
  const Fp8Block b;
  std::vector<float> rows(kRows * kCols), scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  const Fp8BlockShape s{kRows, kCols};
  for (auto _ : state) {
    fp8_block_decode_rows(b.q, b.scales, s, 0, rows);
    for (std::size_t r = 0; r < kRows; ++r) {
      int4_encode_row(std::span(rows).subspan(r * kCols, kCols), 128,
                      std::span(packed).subspan(r * kCols / 2, kCols / 2), scales);
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols);
}
BENCHMARK(BM_Fp8ToInt4G128_Scalar);

std::vector<std::uint16_t> as_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  bf16_encode_span(v, h);
  return h;
}

void BM_Bf16ToInt4G128(benchmark::State& state) {
  const auto in = as_bf16(gaussian(kRows * kCols, 0.05f));
  std::vector<float> row(kCols), scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      kernels::bf16_to_f32(in.data() + r * kCols, kCols, row.data());
      kernels::int4_encode_row(row.data(), kCols, 128, packed.data() + r * kCols / 2,
                               scales.data());
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols * 2);
}
BENCHMARK(BM_Bf16ToInt4G128);

void BM_Bf16ToInt4G128_Fused(benchmark::State& state) {
  const auto in = as_bf16(gaussian(kRows * kCols, 0.05f));
  std::vector<float> scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      kernels::bf16_to_int4_row(in.data() + r * kCols, kCols, 128, packed.data() + r * kCols / 2,
                                scales.data());
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols * 2);
}
BENCHMARK(BM_Bf16ToInt4G128_Fused);

void BM_Bf16ToInt4G128_Scalar(benchmark::State& state) {
  const auto in = as_bf16(gaussian(kRows * kCols, 0.05f));
  std::vector<float> row(kCols), scales(kCols / 128);
  std::vector<std::uint8_t> packed(kRows * kCols / 2);
  for (auto _ : state) {
    for (std::size_t r = 0; r < kRows; ++r) {
      bf16_decode_span(std::span(in).subspan(r * kCols, kCols), row);
      int4_encode_row(row, 128, std::span(packed).subspan(r * kCols / 2, kCols / 2), scales);
    }
    benchmark::DoNotOptimize(packed.data());
  }
  set_bytes(state, kRows * kCols * 2);
}
BENCHMARK(BM_Bf16ToInt4G128_Scalar);

std::vector<std::uint16_t> as_f16(const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  f16_encode_span(v, h);
  return h;
}

void BM_Fp16ToE0m3Sfb(benchmark::State& state) {
  set_thread_count(1);
  const auto in = as_f16(gaussian(kRows * kCols, 0.05f));
  std::vector<std::uint8_t> packed(kRows * kCols / 2), sf(sf_sm1xx_size(kRows, kCols));
  for (auto _ : state) {
    benchmark::DoNotOptimize(e0m3_quantize(in, kRows, kCols, packed, sf).ok());
  }
  set_bytes(state, kRows * kCols * 2);
  set_thread_count(0);
}
BENCHMARK(BM_Fp16ToE0m3Sfb);

void BM_Fp16ToE0m3Sfb_Scalar(benchmark::State& state) {
  const auto in = as_f16(gaussian(kRows * kCols, 0.05f));
  std::vector<std::uint8_t> packed(kRows * kCols / 2), sf(sf_sm1xx_size(kRows, kCols));
  for (auto _ : state) {
    benchmark::DoNotOptimize(e0m3_quantize_reference(in, kRows, kCols, packed, sf).ok());
  }
  set_bytes(state, kRows * kCols * 2);
}
BENCHMARK(BM_Fp16ToE0m3Sfb_Scalar);

// 64 Ki elements: the row-sized working set the pipeline keeps in L2 (a 4 MiB output would
// measure the L3, not the kernel).
constexpr std::size_t kN = std::size_t{1} << 16;

void BM_E4m3Encode(benchmark::State& state) {
  const auto in = gaussian(kN, 100.0f);
  std::vector<std::uint8_t> out(kN);
  for (auto _ : state) {
    kernels::e4m3_encode_div(in.data(), kN, 1.0f, true, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kN * 4);
}
BENCHMARK(BM_E4m3Encode);

void BM_E4m3Decode(benchmark::State& state) {
  std::vector<std::uint8_t> in(kN);
  for (std::size_t i = 0; i < kN; ++i) in[i] = static_cast<std::uint8_t>((i * 37) & 0x7E);
  std::vector<float> out(kN);
  const float one = 1.0f;
  for (auto _ : state) {
    kernels::fp8_decode_scaled(in.data(), kN, &one, kN, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kN);
}
BENCHMARK(BM_E4m3Decode);

void BM_Bf16Encode(benchmark::State& state) {
  const auto in = gaussian(kN, 1.0f);
  std::vector<std::uint16_t> out(kN);
  for (auto _ : state) {
    kernels::f32_to_bf16(in.data(), kN, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kN * 4);
}
BENCHMARK(BM_Bf16Encode);

void BM_Bf16Decode(benchmark::State& state) {
  const auto in = as_bf16(gaussian(kN, 1.0f));
  std::vector<float> out(kN);
  for (auto _ : state) {
    kernels::bf16_to_f32(in.data(), kN, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kN * 2);
}
BENCHMARK(BM_Bf16Decode);

}  // namespace
