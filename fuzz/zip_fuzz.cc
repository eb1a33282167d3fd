// libFuzzer target: the zip central directory reader and CRC-checked entry reads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "qrepack/io/zip_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto src =
      std::make_shared<MemorySource>("fuzz.zip", std::vector<std::uint8_t>(data, data + size));
  auto z = ZipReader::open(src);
  if (!z.ok()) return 0;
  for (const ZipEntry& e : z->entries()) (void)z->read_checked(e, 1 << 20);
  return 0;
}
