// Sequential byte sinks. AtomicFileSink writes a sibling temp file and renames it over the
// destination only on commit(): a failed or abandoned write leaves nothing at the destination
// and removes its temp file. MemorySink is the in-memory twin used by tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual const std::string& name() const = 0;
  virtual Status write(std::span<const std::uint8_t> bytes) = 0;
  /// Makes the bytes durable and visible at the destination. No write after commit.
  virtual Status commit() = 0;
  /// Bytes written so far.
  virtual std::uint64_t position() const = 0;
  /// Overwrites bytes already written at `offset` (a header whose checksum is known only after
  /// its data). Sinks that cannot seek refuse.
  virtual Status patch(std::uint64_t offset, std::span<const std::uint8_t> bytes);
};

class AtomicFileSink final : public ByteSink {
 public:
  /// Creates the temp file beside `path` (same directory, so the rename is atomic).
  static Result<std::unique_ptr<AtomicFileSink>> create(const std::string& path);
  ~AtomicFileSink() override;  ///< removes the temp file unless committed
  AtomicFileSink(const AtomicFileSink&) = delete;
  AtomicFileSink& operator=(const AtomicFileSink&) = delete;

  const std::string& name() const override { return path_; }
  Status write(std::span<const std::uint8_t> bytes) override;
  /// Flushes, fsyncs, renames over `path`, fsyncs the directory (= prepare() + publish()).
  Status commit() override;
  Status patch(std::uint64_t offset, std::span<const std::uint8_t> bytes) override;
  /// First half of commit: flush, fsync and close the temp file. Lets a multi-file writer make
  /// every file durable before any becomes visible.
  Status prepare();
  /// Second half: rename into place and fsync the directory.
  Status publish();
  std::uint64_t position() const override { return position_; }
  /// Allocates the file's `bytes` up front (fallocate): a destination without room fails here,
  /// before any data is produced, and writes then fill allocated pages. On tmpfs, where that
  /// would allocate the memory itself before any data, the free space is checked instead.
  /// Filesystems without fallocate are left to allocate as they write. prepare() trims what
  /// was not written.
  Status reserve(std::uint64_t bytes);
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileSink(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  Status flush();
  std::string path_;
  std::string temp_path_;
  int fd_;
  bool prepared_ = false;
  bool committed_ = false;
  std::uint64_t position_ = 0;
  std::uint64_t reserved_ = 0;
  std::vector<std::uint8_t> buffer_;
};

class MemorySink final : public ByteSink {
 public:
  explicit MemorySink(std::string name = "<memory>") : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  Status write(std::span<const std::uint8_t> bytes) override;
  Status commit() override;
  Status patch(std::uint64_t offset, std::span<const std::uint8_t> bytes) override;
  std::uint64_t position() const override { return bytes_.size(); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  bool committed() const { return committed_; }

 private:
  std::string name_;
  std::vector<std::uint8_t> bytes_;
  bool committed_ = false;
};

}  // namespace qrepack
