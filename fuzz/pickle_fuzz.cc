// libFuzzer target: the restricted unpickler and .pt tensor reads, on a bare pickle that the
// harness zips itself (pickle_input.h), so mutations reach the unpickler.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pickle_input.h"
#include "walk_pt.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto pt = fuzz::pickle_input_to_pt(std::span(data, size));
  if (pt.empty()) return 0;
  auto f = TorchFile::from_source(std::make_shared<MemorySource>("fuzz.pt", std::move(pt)));
  if (f.ok()) fuzz::read_every_tensor(*f);
  return 0;
}
