// libFuzzer target: a sharded checkpoint's model.safetensors.index.json, opened with
// Checkpoint::open beside two real shards (written once per process into a temp directory).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "qrepack/io/checkpoint.h"
#include "qrepack/io/safetensors_writer.h"

namespace {

std::string make_dir() {
  char tmpl[] = "/tmp/qrepack-index-fuzz-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  if (!d) std::abort();
  const std::string dir = d;
  using namespace qrepack;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = make_dir();
  const std::string index = dir + "/model.safetensors.index.json";
  const int fd = ::open(index.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  (void)qrepack::Checkpoint::open(dir);
  return 0;
}
