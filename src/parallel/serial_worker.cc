#include "qrepack/parallel/serial_worker.h"

namespace qrepack {

SerialWorker::SerialWorker() : thread_([this] { loop(); }) {}

SerialWorker::~SerialWorker() {
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return completed_ == submitted_; });
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

std::uint64_t SerialWorker::submit(std::function<Status()> task) {
  std::uint64_t ticket;
  {
    std::unique_lock lock(mu_);
    queue_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  work_.notify_one();
  return ticket;
}

Status SerialWorker::wait(std::uint64_t ticket) {
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return completed_ >= ticket; });
  return failed_ ? failure_ : ok_status();
}

void SerialWorker::loop() {
  for (;;) {
    std::function<Status()> task;
    bool skip;
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      skip = failed_;
    }
    Status st = skip ? ok_status() : task();
    {
      std::unique_lock lock(mu_);
      if (!st.ok() && !failed_) {
        failed_ = true;
        failure_ = std::move(st);
      }
      ++completed_;
    }
    done_.notify_all();
  }
}

}  // namespace qrepack
