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

 private:
  explicit FetchPool(int threads);
  void work();
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
};

}  // namespace qrepack::remote
