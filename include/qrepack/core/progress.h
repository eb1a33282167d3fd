// The progress line of long jobs: "label  done/total  GB/s  ETA" rewritten in place on stderr
// at most ten times a second, and a newline at the end. Shown when stderr is a terminal, or
// always with --progress; never interleaved with stdout reports (they go to stdout).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace qrepack {

enum class ProgressMode : std::uint8_t {
  kAuto,    ///< on when stderr is a terminal
  kAlways,  ///< --progress
  kNever,
};

class ProgressLine {
 public:
  ProgressLine(std::uint64_t total_bytes, ProgressMode mode);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  /// `label` (e.g. the tensor in work) and the bytes of the total completed so far.
  void update(std::string_view label, std::uint64_t done_bytes);
  /// Ends the line (idempotent; the destructor calls it).
  void finish();
  bool enabled() const { return enabled_; }
  /// Text appended to every line (a remote source's bytes received and retries), asked for
  /// when a line is drawn.
  void set_extra(std::function<std::string()> extra) { extra_ = std::move(extra); }

  /// The text of one line, for tests: label, "12.3 MB/80.0 MB", rate and ETA.
  static std::string render(std::string_view label, std::uint64_t done, std::uint64_t total,
                            double seconds);

 private:
  std::uint64_t total_;
  bool enabled_;
  bool dirty_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  std::size_t last_width_ = 0;
  std::function<std::string()> extra_;
};

}  // namespace qrepack
