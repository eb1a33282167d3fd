// The directory the index fuzz target opens: two real shards whose tensors an index may map
// ("a.weight", "a.bias" in model-00001-of-00002.safetensors, "b.*" in the second), written
// once into a directory. Shared with the regression replay test.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors_writer.h"

namespace qrepack::fuzz {

/// Writes the two shards into existing directory `dir`; returns `dir`.
inline std::string make_index_fuzz_dir(const std::string& dir) {
  for (int s = 0; s < 2; ++s) {
    const std::string name = s == 0 ? "a" : "b";
    auto layout = plan_safetensors(
        {{name + ".weight", Dtype::kF32, {2, 2}}, {name + ".bias", Dtype::kBF16, {2}}}, {});
    if (!layout.ok()) std::abort();
    auto sink = AtomicFileSink::create(dir + "/model-0000" + std::to_string(s + 1) +
                                       "-of-00002.safetensors");
    if (!sink.ok()) std::abort();
    SafetensorsWriter w(*layout, **sink);
    const std::vector<std::uint8_t> bytes(16, 0);
    if (!w.write_tensor(name + ".weight", bytes).ok() ||
        !w.write_tensor(name + ".bias", std::span(bytes.data(), 4)).ok() || !w.finish().ok()) {
      std::abort();
    }
  }
  return dir;
}

}  // namespace qrepack::fuzz
