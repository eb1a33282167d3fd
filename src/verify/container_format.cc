#include "qrepack/verify/container_format.h"

#include <fmt/format.h>

#include "qrepack/schemes/scheme.h"

namespace qrepack {

std::string ContainerFormat::name() const {
  switch (kind) {
    case kInt8Row:
      return "int8-row";
    case kInt4Row:
      return "int4-row";
    case kInt4Group:
      return fmt::format("int4-g{}", group);
  }
  return "?";
}

std::optional<ContainerFormat> detect_container_format(std::uint64_t o, std::uint64_t i,
                                                       std::uint64_t nb, std::uint64_t ns) {
  if (nb == o * i) {
    if (ns == 4 * o) return ContainerFormat{ContainerFormat::kInt8Row};
    return std::nullopt;
  }
  if (nb != o * ((i + 1) / 2)) return std::nullopt;
  if (ns == 4 * o) return ContainerFormat{ContainerFormat::kInt4Row};
  // detect_group_size: finest first, stopping at g > I.
  for (std::uint64_t g : engine_group_sizes()) {
    if (g > i) break;
    if (ns == 4 * o * ((i + g - 1) / g)) return ContainerFormat{ContainerFormat::kInt4Group, g};
  }
  return std::nullopt;
}

}  // namespace qrepack
