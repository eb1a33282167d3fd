// A background thread that runs submitted tasks one at a time in submission order: the I/O
// lane of a pipeline (read the next block, write the previous one) while the pool computes the
// current block. Lives beside parallel_for so threads are started in one module only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "qrepack/core/error.h"

namespace qrepack {

class SerialWorker {
 public:
  SerialWorker();
  ~SerialWorker();  ///< waits for every submitted task
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  /// Queues `task`; returns its ticket (1, 2, ...). After a task fails, later tasks are
  /// skipped and every wait returns that failure.
  std::uint64_t submit(std::function<Status()> task);
  /// Blocks until the task with `ticket` (and all before it) ran; the first failure so far.
  Status wait(std::uint64_t ticket);
  /// wait() for everything submitted.
  Status wait_all() { return wait(submitted_); }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<std::function<Status()>> queue_;
  std::uint64_t submitted_ = 0, completed_ = 0;
  Status failure_ = ok_status();
  bool failed_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace qrepack
