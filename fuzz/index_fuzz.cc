// libFuzzer target: a sharded checkpoint's model.safetensors.index.json, opened with
// Checkpoint::open beside two real shards (written once per process into a temp directory,
// removed when the process exits).
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "index_dir.h"
#include "qrepack/io/checkpoint.h"

namespace {

char g_dir[] = "/tmp/qrepack-index-fuzz-XXXXXX";

// libFuzzer ends a timed run with exit(), so the directory goes with the process.
void remove_dir() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    if (!::mkdtemp(g_dir)) std::abort();
    std::atexit(remove_dir);
    return qrepack::fuzz::make_index_fuzz_dir(g_dir);
  }();
  const std::string index = dir + "/model.safetensors.index.json";
  const int fd = ::open(index.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fd);
  (void)qrepack::Checkpoint::open(dir);
  return 0;
}
