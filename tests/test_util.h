// Helpers shared by tests: a deterministic PRNG, temporary directories, file bytes, and a way to
// run the qrepack binary and capture its exit code and output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/prng.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack::testing {

using qrepack::SplitMix64;

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

/// A tensor of a hand-built safetensors file: its bytes as given.
struct RawTensor {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;
};
/// Every row of logical weight `name` of the checkpoint at `dir`, decoded through the reader (a
/// test failure when it is not recognised, or when `encoding` is given and is not its source
/// encoding).
std::vector<float> decode_weight(const std::string& dir, const std::string& name,
                                 const std::string& encoding = "");
/// The recognition error of the checkpoint at `dir` ("" when every tensor is recognised).
std::string recognition_error(const std::string& dir);
/// `path` as one safetensors file of `tensors`, in order, written by hand (no qrepack code).
void write_raw_safetensors(const std::filesystem::path& path,
                           const std::vector<RawTensor>& tensors);
void write_text(const std::filesystem::path& path, const std::string& text);
std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path);
std::vector<std::string> list_dir(const std::filesystem::path& dir);
/// A JSON file parsed (an exception, so a test failure, when it is absent or malformed).
nlohmann::json read_json(const std::filesystem::path& path);
/// A JSON array of token ids as the CLI takes them: "1,2,3".
std::string joined_ids(const nlohmann::json& ids);

/// All bytes of tensor `name` (a test failure when it is absent).
std::vector<std::uint8_t> tensor_bytes(const Checkpoint& ck, std::string_view name);
/// An entry's shape (a view) as a vector, for comparisons.
inline std::vector<std::uint64_t> dims(std::span<const std::uint64_t> s) {
  return {s.begin(), s.end()};
}

/// Runs tests/python/`script` with Debian's interpreter (/usr/bin/python3, which has
/// python3-torch) and `args`; returns its exit status (0 on success).
int run_test_python(const std::string& script, const std::vector<std::string>& args);

/// What a script run by run_isolated_python left behind.
struct Leftovers {
  std::vector<std::string> processes;  ///< "pid command line" of each, killed once listed
  std::vector<std::string> files;      ///< entries left in the script's own TMPDIR
  bool empty() const { return processes.empty() && files.empty(); }
  std::string describe() const;
};
struct IsolatedRun {
  int status;  ///< the script's exit status, as run_test_python returns it
  Leftovers left;
};
/// run_test_python with a TMPDIR of its own and a tag (QREPACK_LEFTOVER_TAG) in the environment
/// every process it starts inherits; after it ends, the processes still carrying the tag (given
/// 10 s to end) and whatever is left in that TMPDIR.
IsolatedRun run_isolated_python(const std::string& script, const std::vector<std::string>& args);
/// Runs case `name` of tests/python/`script` (arguments: the CLI's path, then `name`) through
/// run_isolated_python; a failure of the case or anything it leaves behind fails the test.
void expect_script_case(const std::string& script, const std::string& name);

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};
/// Runs the qrepack binary with `args` (shell-quoted here) and captures stdout and stderr.
CliResult run_cli(const std::vector<std::string>& args);

/// `qrepack oracle CKPT ARGS...` at 1, 2 and 3 threads, its files in `dir`: the reference files
/// and the --logits files must be byte-identical.
void expect_oracle_same_for_any_thread_count(const std::string& ckpt,
                                             const std::filesystem::path& dir,
                                             const std::vector<std::string>& args = {});
/// `qrepack eval ARGS... --json`'s document; an empty object, after a failed expectation, when
/// it fails.
nlohmann::json eval_json(const std::vector<std::string>& args);

/// Writes `qrepack fixture NAME [--encoding E]` under `d` (d/NAME or d/NAME-E) once and returns its
/// path (an existing one is reused); a failure is a test failure.
std::string write_fixture(const TempDir& d, const std::string& name,
                          const std::string& encoding = "");

/// Overwrites byte `index` of tensor `name`'s data in the shard of `dir` that holds it.
void poke_tensor_byte(const std::string& dir, const std::string& name, std::uint64_t index,
                      std::uint8_t value);

}  // namespace qrepack::testing
