#include "remote/fetch_pool.h"

#include <thread>

#include "remote/http.h"
#include "remote/remote_file.h"

namespace qrepack::remote {

FetchPool& FetchPool::instance() {
  static FetchPool* pool = [] {
    auto s = settings_from_environment();
    return new FetchPool(s.ok() ? s->connections : HttpSettings{}.connections);
  }();
  return *pool;
}

FetchPool::FetchPool(int threads) {
  for (int i = 0; i < threads; ++i) std::thread([this] { work(); }).detach();
}

void FetchPool::submit(Job job) {
  {
    std::lock_guard lock(m_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void FetchPool::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job.file->fetch(job.chunk);
  }
}

}  // namespace qrepack::remote
