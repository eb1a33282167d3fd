// libFuzzer target: the Omega dit_svdquant_v1 pack validator on a hand-zipped pickle.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "pickle_input.h"
#include "qrepack/omega/pack_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto pt = fuzz::pickle_input_to_pt(std::span(data, size));
  if (pt.empty()) return 0;
  auto f = TorchFile::from_source(std::make_shared<MemorySource>("fuzz.pt", std::move(pt)));
  if (!f.ok()) return 0;
  (void)validate_omega_pack(*f, PackValidateOptions{});
  return 0;
}
