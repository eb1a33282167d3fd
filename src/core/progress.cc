#include "qrepack/core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qrepack {
namespace {

std::string mb(std::uint64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1e9) return fmt::format("{:.2f} GB", v / 1e9);
  return fmt::format("{:.1f} MB", v / 1e6);
}

std::string duration(double s) {
  const auto t = static_cast<long long>(std::llround(s));
  if (t < 60) return fmt::format("{} s", t);
  if (t < 3600) return fmt::format("{} min {:02} s", t / 60, t % 60);
  return fmt::format("{} h {:02} min", t / 3600, (t % 3600) / 60);
}

}  // namespace

ProgressLine::ProgressLine(std::uint64_t total_bytes, ProgressMode mode)
    : total_(total_bytes),
      enabled_(mode == ProgressMode::kAlways ||
               (mode == ProgressMode::kAuto && ::isatty(STDERR_FILENO) == 1)),
      start_(std::chrono::steady_clock::now()),
      last_(start_ - std::chrono::seconds(1)) {}

ProgressLine::~ProgressLine() { finish(); }

std::string ProgressLine::render(std::string_view label, std::uint64_t done, std::uint64_t total,
                                 double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  std::string eta = "-";
  if (rate > 0 && total >= done) eta = duration(static_cast<double>(total - done) / rate);
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100;
  return fmt::format("{:5.1f}% {}/{}  {:.2f} GB/s  ETA {}  {}", pct, mb(done), mb(total),
                     rate / 1e9, eta, label);
}

void ProgressLine::update(std::string_view label, std::uint64_t done_bytes) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done_bytes < total_) return;
  last_ = now;
  std::string line =
      render(label, done_bytes, total_, std::chrono::duration<double>(now - start_).count());
  if (extra_) line += "  " + extra_();
  const std::size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
  std::fprintf(stderr, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  std::fflush(stderr);
  last_width_ = line.size();
  dirty_ = true;
}

void ProgressLine::finish() {
  if (!dirty_) return;
  std::fputc('\n', stderr);
  std::fflush(stderr);
  dirty_ = false;
}

}  // namespace qrepack
