#include "cli/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "qrepack/core/checked.h"

namespace qrepack::cli {

Status StdioSink::write(std::span<const std::uint8_t> bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stream_) != bytes.size()) {
    return Error(ErrorKind::kIoWrite, "cannot write").in_file(name_);
  }
  position_ += bytes.size();
  return ok_status();
}

Status StdioSink::commit() {
  if (std::fflush(stream_) != 0) return Error(ErrorKind::kIoWrite, "cannot flush").in_file(name_);
  return ok_status();
}

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

Result<std::uint64_t> parse_size(const std::string& text) {
  std::size_t i = 0;
  std::uint64_t n = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const auto times10 = checked_mul(n, 10);
    const auto next =
        times10 ? checked_add(*times10, static_cast<std::uint64_t>(text[i] - '0')) : std::nullopt;
    if (!next) {
      return Error(ErrorKind::kUsage, fmt::format("size \"{}\" is too large", text));
    }
    n = *next;
    ++i;
  }
  if (i == 0) {
    return Error(ErrorKind::kUsage,
                 fmt::format("size \"{}\" must start with a number, e.g. 5GB or 500MiB", text));
  }
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  struct Unit {
    const char* name;
    std::uint64_t mult;
  };
  const Unit units[] = {{"", 1},
                        {"B", 1},
                        {"K", 1000},
                        {"KB", 1000},
                        {"M", 1000000},
                        {"MB", 1000000},
                        {"G", 1000000000},
                        {"GB", 1000000000},
                        {"T", 1000000000000ull},
                        {"TB", 1000000000000ull},
                        {"KIB", 1ull << 10},
                        {"MIB", 1ull << 20},
                        {"GIB", 1ull << 30},
                        {"TIB", 1ull << 40}};
  for (const Unit& u : units) {
    if (unit == u.name) {
      const auto v = checked_mul(n, u.mult);
      if (!v) return Error(ErrorKind::kUsage, fmt::format("size \"{}\" is too large", text));
      return *v;
    }
  }
  return Error(
      ErrorKind::kUsage,
      fmt::format("unknown size unit in \"{}\" (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text));
}

Table::Table(std::vector<std::string> header, std::vector<bool> right_align)
    : header_(std::move(header)), right_(std::move(right_align)) {
  right_.resize(header_.size(), false);
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

std::string or_list(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    out += i == 0 ? "" : i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

void print_table(std::FILE* out, const std::vector<std::string>& header,
                 const std::vector<bool>& right, std::size_t rows, const RowFn& row) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (std::size_t i = 0; i < rows; ++i) {
    const auto r = row(i);
    for (std::size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool last = c + 1 == r.size();
      if (c < right.size() && right[c]) {
        s += fmt::format("{:>{}}", r[c], w[c]);
      } else {
        s += last ? r[c] : fmt::format("{:<{}}", r[c], w[c]);
      }
      if (!last) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print(out, "{}\n", s);
  };
  line(header);
  for (std::size_t i = 0; i < rows; ++i) line(row(i));
}

void Table::print(std::FILE* out) const {
  print_table(out, header_, right_, rows_.size(), [this](std::size_t i) { return rows_[i]; });
}

}  // namespace qrepack::cli
