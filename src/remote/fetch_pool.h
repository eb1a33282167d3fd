// The connections remote files fetch their chunks on: a fixed set of threads (one HTTP
// connection each, QREPACK_HTTP_CONNECTIONS) taking jobs in the order they were asked. The
// pool lives until the process ends (its threads are never joined: an exit on an error must
// not wait for a stalled transfer).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace qrepack::remote {

class RemoteFile;

class FetchPool {
 public:
  struct Job {
    std::shared_ptr<RemoteFile> file;
    std::uint64_t chunk;
  };
  static FetchPool& instance();
  void submit(Job job);
  /// `file` is being read: when it is not the file read last, every other file's window is
  /// trimmed (memory stays one window, not one per shard the run touched).
  void note_reading(const RemoteFile* file);
  /// A chunk buffer of `bytes`: a recycled one when there is one (a fresh 4 MiB block is a
  /// new mapping whose every page faults in, zeroed, on first write).
  std::unique_ptr<std::uint8_t[]> take_buffer(std::uint64_t bytes);
  /// Returns a buffer of `bytes` for reuse (at most kSpareBuffers of one size are kept).
  void give_buffer(std::unique_ptr<std::uint8_t[]> buffer, std::uint64_t bytes);

 private:
  explicit FetchPool(int threads);
  void work();
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::mutex active_m_;
  const RemoteFile* last_read_ = nullptr;
  std::vector<std::weak_ptr<RemoteFile>> files_;  ///< every file that has started a stream
  std::mutex spare_m_;
  std::vector<std::unique_ptr<std::uint8_t[]>> spare_;
  std::uint64_t spare_bytes_ = 0;  ///< the size of every spare buffer
};

/// Chunk buffers kept for reuse (an evicted chunk's buffer is taken by the next fetch).
inline constexpr std::size_t kSpareBuffers = 2;

/// Chunks a file keeps while another one is read (its hot scale chunk, typically), for the
/// kIdleFiles files read last; older files keep none.
inline constexpr std::size_t kIdleChunks = 1;
inline constexpr std::size_t kIdleFiles = 2;

}  // namespace qrepack::remote
