// Turns a fuzz input into a torch.save zip around a hand-made pickle, so the fuzzer mutates
// the pickle itself: a mutated pickle inside a real .pt would fail the zip's CRC32 check and
// explore nothing past the zip reader. Shared by the pickle and Omega pack fuzz targets and by
// the regression replay test (tests/fuzz_regression_test.cc), which runs findings through the
// CLI.
//
// Input: [u8 n][n x u32 little-endian storage byte sizes][pickle bytes], n capped at 64 and
// the sizes at 1 MiB together (a mutated size must not make every run allocate much). Storage
// i is record "archive/data/<i>", filled with a fixed byte pattern.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt_writer.h"

namespace qrepack::fuzz {

inline constexpr std::size_t kMaxFuzzStorages = 64;
inline constexpr std::uint32_t kMaxFuzzStorageBytes = 1u << 20;  ///< all storages together

/// The .pt bytes for `input`, or empty when the input is too short to hold its own header.
inline std::vector<std::uint8_t> pickle_input_to_pt(std::span<const std::uint8_t> input) {
  if (input.empty()) return {};
  const std::size_t n = std::min<std::size_t>(input[0], kMaxFuzzStorages);
  if (input.size() < 1 + 4 * n) return {};
  std::vector<std::vector<std::uint8_t>> storages(n);
  std::uint32_t budget = kMaxFuzzStorageBytes;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t size = 0;
    for (int b = 3; b >= 0; --b)
      size = (size << 8) | input[1 + 4 * i + static_cast<std::size_t>(b)];
    storages[i].resize(std::min(size, budget));
    budget -= static_cast<std::uint32_t>(storages[i].size());
    for (std::size_t k = 0; k < storages[i].size(); ++k) {
      storages[i][k] = static_cast<std::uint8_t>((k * 37 + i * 11 + 60) & 0x7f);
    }
  }
  MemorySink sink("fuzz.pt");
  if (!write_torch_zip(sink, input.subspan(1 + 4 * n), storages).ok()) return {};
  return sink.bytes();
}

}  // namespace qrepack::fuzz
