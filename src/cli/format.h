// Text output helpers shared by subcommands: aligned tables and byte counts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack::cli {

/// A stdio stream as a ByteSink (stdout, for JSON documents streamed record by record); commit
/// flushes it.
class StdioSink final : public ByteSink {
 public:
  StdioSink(std::FILE* stream, std::string name) : stream_(stream), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  Status write(std::span<const std::uint8_t> bytes) override;
  Status commit() override;
  std::uint64_t position() const override { return position_; }

 private:
  std::FILE* stream_;
  std::string name_;
  std::uint64_t position_ = 0;
};

/// "1.23 GB" style, decimal units (as shard limits and Hugging Face use them).
std::string human_bytes(std::uint64_t bytes);

/// Parses "5GB", "500MB", "2GiB", "123" (bytes). Decimal K/M/G/T, binary Ki/Mi/Gi/Ti.
Result<std::uint64_t> parse_size(const std::string& text);

/// The names of a (name, value) table, in order.
template <typename Table>
std::vector<std::string> table_names(const Table& table) {
  std::vector<std::string> out;
  for (const auto& entry : table) out.emplace_back(entry.first);
  return out;
}

/// "a, b or c": the words of a usage message.
std::string or_list(const std::vector<std::string>& words);

/// Row `i` of a table, produced on demand.
using RowFn = std::function<std::vector<std::string>(std::size_t i)>;

/// Prints a table whose rows are produced twice (once for the column widths, once to print)
/// instead of held: memory is one row whatever the row count. Same layout as Table.
void print_table(std::FILE* out, const std::vector<std::string>& header,
                 const std::vector<bool>& right, std::size_t rows, const RowFn& row);

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
