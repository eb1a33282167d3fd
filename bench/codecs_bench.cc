// Scalar reference codecs (the specifications the SIMD kernels are tested against), in bytes
// of input per second: the baseline the kernels_bench figures are compared with.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "qrepack/core/prng.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp4.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/schemes/fp8_block.h"

namespace {

constexpr std::size_t kN = std::size_t{1} << 20;

std::vector<float> random_floats(std::size_t n, float scale) {
  qrepack::SplitMix64 rng(42);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.gauss() * scale;
  return v;
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> in = random_floats(kN, 1.0f), out(kN);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kN * sizeof(float));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * sizeof(float)));
}
BENCHMARK(BM_Memcpy);

// The same copy between buffers far larger than any cache: the memory-bandwidth ceiling a
// conversion streaming a checkpoint meets (BM_Memcpy's 4 MiB stays in a large L3).
void BM_MemcpyDram(benchmark::State& state) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<std::uint8_t> in(kBytes, 1), out(kBytes, 2);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), kBytes);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBytes));
}
BENCHMARK(BM_MemcpyDram);

void BM_Scalar_E4m3EncodeSaturate(benchmark::State& state) {
  const auto in = random_floats(kN, 100.0f);
  std::vector<std::uint8_t> out(kN);
  for (auto _ : state) {
    qrepack::e4m3_encode_span(in, out, qrepack::Fp8Overflow::kSaturate);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * sizeof(float)));
}
BENCHMARK(BM_Scalar_E4m3EncodeSaturate);

void BM_Scalar_E4m3Decode(benchmark::State& state) {
  std::vector<std::uint8_t> in(kN);
  for (std::size_t i = 0; i < kN; ++i) in[i] = static_cast<std::uint8_t>(i * 37);
  std::vector<float> out(kN);
  for (auto _ : state) {
    qrepack::e4m3_decode_span(in, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN));
}
BENCHMARK(BM_Scalar_E4m3Decode);

void BM_Scalar_Bf16Encode(benchmark::State& state) {
  const auto in = random_floats(kN, 1.0f);
  std::vector<std::uint16_t> out(kN);
  for (auto _ : state) {
    qrepack::bf16_encode_span(in, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * sizeof(float)));
}
BENCHMARK(BM_Scalar_Bf16Encode);

void BM_Scalar_Bf16Decode(benchmark::State& state) {
  std::vector<std::uint16_t> in(kN);
  for (std::size_t i = 0; i < kN; ++i) in[i] = static_cast<std::uint16_t>(0x3F80 + (i & 0x7F));
  std::vector<float> out(kN);
  for (auto _ : state) {
    qrepack::bf16_decode_span(in, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * 2));
}
BENCHMARK(BM_Scalar_Bf16Decode);

void BM_Scalar_F16Encode(benchmark::State& state) {
  const auto in = random_floats(kN, 1.0f);
  std::vector<std::uint16_t> out(kN);
  for (auto _ : state) {
    qrepack::f16_encode_span(in, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * sizeof(float)));
}
BENCHMARK(BM_Scalar_F16Encode);

void BM_Scalar_E0m3Encode(benchmark::State& state) {
  const auto in = random_floats(kN, 3.0f);
  std::vector<std::uint8_t> out(kN);
  for (auto _ : state) {
    qrepack::e0m3_encode_span(in, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kN * sizeof(float)));
}
BENCHMARK(BM_Scalar_E0m3Encode);

void BM_Scalar_Fp8BlockDecode(benchmark::State& state) {
  const qrepack::Fp8BlockShape s{1024, 1024};
  const auto w = random_floats(s.rows * s.cols, 0.05f);
  std::vector<std::uint8_t> q(w.size());
  std::vector<float> scale(s.scale_rows() * s.scale_cols()), out(w.size());
  qrepack::fp8_block_encode(w, s, q, scale);
  for (auto _ : state) {
    qrepack::fp8_block_decode_rows(q, scale, s, 0, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * q.size()));
}
BENCHMARK(BM_Scalar_Fp8BlockDecode);

}  // namespace
