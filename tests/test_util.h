// Helpers shared by tests: a deterministic PRNG, temporary directories, file bytes, and a way to
// run the qrepack binary and capture its exit code and output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qrepack::testing {

/// SplitMix64: a specified generator, identical on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint32_t next_u32() { return static_cast<std::uint32_t>(next() >> 32); }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }

 private:
  std::uint64_t state_;
};

/// A fresh directory removed (recursively) when the object goes out of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes);
void write_text(const std::filesystem::path& path, const std::string& text);
std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path);
std::vector<std::string> list_dir(const std::filesystem::path& dir);

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};
/// Runs the qrepack binary with `args` (shell-quoted here) and captures stdout and stderr.
CliResult run_cli(const std::vector<std::string>& args);

}  // namespace qrepack::testing
