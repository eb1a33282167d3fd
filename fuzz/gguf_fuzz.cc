// libFuzzer target: the GGUF reader (header, metadata, tensor infos), a read and decode of every
// tensor whose type qrepack decodes, the colibri-olmoe plan (names, shapes, config.json and
// tokenizer.json rebuilt from the metadata) and the colibri-gemma4 plan (the expert tensors'
// types, shapes and offsets, the manifest).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/gguf.h"
#include "targets/gemma4/gemma4_pack.h"
#include "targets/olmoe/olmoe_gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qrepack;
  auto src =
      std::make_shared<MemorySource>("fuzz.gguf", std::vector<std::uint8_t>(data, data + size));
  auto f = GgufFile::from_source(src);
  if (!f.ok()) return 0;
  std::vector<std::uint8_t> raw;
  std::vector<float> out;
  for (const GgufTensor& t : f->header().tensors) {
    raw.resize(t.bytes);  // inside the input: validated
    if (!f->read(t, 0, raw).ok()) continue;
    const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
    if (!info || !info->decodes || t.numel > (std::uint64_t{1} << 22)) continue;  // newer: unsized
    out.resize(t.numel);
    (void)ggml_dequantize_row(t.ggml_type, raw, out);
  }
  (void)plan_olmoe_gguf(*f, {});
  (void)plan_gemma4_pack(*f);
  return 0;
}
