// How the C engine infers a quantized weight's format from byte counts alone (no format id is
// stored; reference/colibri.md §3.5): weight bytes nb and scale bytes ns against the config's
// [O, I]. Used by check-load and by verify's decoder, so both read outputs as the engine does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace qrepack {

struct ContainerFormat {
  enum Kind { kInt8Row, kInt4Row, kInt4Group } kind;
  std::uint64_t group = 0;  ///< kInt4Group
  std::string name() const;
};

/// nullopt when no engine format fits (the engine refuses such a container).
std::optional<ContainerFormat> detect_container_format(std::uint64_t rows, std::uint64_t cols,
                                                       std::uint64_t weight_bytes,
                                                       std::uint64_t scale_bytes);

}  // namespace qrepack
