// libFuzzer target: a whole .pt file (zip + pickle + storage checks), then every tensor read.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "walk_pt.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto src =
      std::make_shared<MemorySource>("fuzz.pt", std::vector<std::uint8_t>(data, data + size));
  auto f = TorchFile::from_source(src);
  if (f.ok()) fuzz::read_every_tensor(*f);
  return 0;
}
