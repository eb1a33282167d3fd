// Text output helpers shared by subcommands: aligned tables and byte counts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack::cli {

/// "1.23 GB" style, decimal units (as shard limits and Hugging Face use them).
std::string human_bytes(std::uint64_t bytes);

/// Parses "5GB", "500MB", "2GiB", "123" (bytes). Decimal K/M/G/T, binary Ki/Mi/Gi/Ti.
Result<std::uint64_t> parse_size(const std::string& text);

class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_align = {});
  void add(std::vector<std::string> row);
  void print(std::FILE* out) const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace qrepack::cli
