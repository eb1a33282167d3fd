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

void FetchPool::note_reading(const RemoteFile* file) {
  std::vector<std::shared_ptr<RemoteFile>> others;
  {
    std::lock_guard lock(active_m_);
    if (file == last_read_) return;
    last_read_ = file;
    bool known = false;
    for (auto it = files_.begin(); it != files_.end();) {
      auto f = it->lock();
      if (!f) {
        it = files_.erase(it);
        continue;
      }
      if (f.get() == file)
        known = true;
      else
        others.push_back(std::move(f));
      ++it;
    }
    if (!known) files_.push_back(std::const_pointer_cast<RemoteFile>(file->shared_from_this()));
  }
  for (const auto& f : others) f->trim(kIdleChunks);  // no lock held: trim takes the file's
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
