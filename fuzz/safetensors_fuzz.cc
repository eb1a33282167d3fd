// libFuzzer target: the safetensors prefix and header validation, then reads of every tensor.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "qrepack/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto src = std::make_shared<MemorySource>("fuzz.safetensors",
                                            std::vector<std::uint8_t>(data, data + size));
  auto f = SafetensorsFile::from_source(src);
  if (!f.ok()) return 0;
  std::vector<std::uint8_t> buf;
  for (const TensorEntry& t : f->tensors()) {
    buf.resize(t.byte_size());  // in bounds of the input: validated
    (void)f->read(t, 0, buf);
  }
  return 0;
}
