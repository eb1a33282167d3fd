#include "remote/fetch_pool.h"

#include <algorithm>
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
  std::vector<std::shared_ptr<RemoteFile>> others;  // most recently read first
  {
    std::lock_guard lock(active_m_);
    if (file == last_read_) return;
    last_read_ = file;
    // files_ in order of reading, the newest last; `file` moves to the end.
    for (auto it = files_.begin(); it != files_.end();) {
      auto f = it->lock();
      if (!f || f.get() == file) {
        it = files_.erase(it);
        continue;
      }
      others.push_back(std::move(f));
      ++it;
    }
    files_.push_back(std::const_pointer_cast<RemoteFile>(file->shared_from_this()));
  }
  std::reverse(others.begin(), others.end());
  // No lock held: trim takes the file's. The files read last keep a chunk (a scale read
  // across a shard boundary); older ones keep nothing, whatever the shard count.
  for (std::size_t i = 0; i < others.size(); ++i) {
    others[i]->trim(i < kIdleFiles ? kIdleChunks : 0);
  }
}

std::unique_ptr<std::uint8_t[]> FetchPool::take_buffer(std::uint64_t bytes) {
  {
    std::lock_guard lock(spare_m_);
    if (!spare_.empty() && spare_bytes_ == bytes) {
      auto b = std::move(spare_.back());
      spare_.pop_back();
      return b;
    }
  }
  return std::make_unique_for_overwrite<std::uint8_t[]>(static_cast<std::size_t>(bytes));
}

void FetchPool::give_buffer(std::unique_ptr<std::uint8_t[]> buffer, std::uint64_t bytes) {
  std::lock_guard lock(spare_m_);
  if (spare_bytes_ != bytes) {
    spare_.clear();
    spare_bytes_ = bytes;
  }
  if (spare_.size() < kSpareBuffers) spare_.push_back(std::move(buffer));
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
