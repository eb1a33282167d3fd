#include "qrepack/parallel/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/spin_wait.h"

namespace qrepack {
namespace {

class Pool {
 public:
  ~Pool() { resize(1); }

  void resize(std::size_t threads) {
    {
      std::unique_lock lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    threads_ = std::max<std::size_t>(1, threads);
    for (std::size_t w = 1; w < threads_; ++w) workers_.emplace_back([this, w] { loop(w); });
  }

  std::size_t threads() const { return threads_; }

  void run(std::size_t n, std::size_t min_chunk,
           const std::function<void(std::size_t, std::size_t, std::size_t)>& fn) {
    const std::size_t parts =
        std::min(threads_, std::max<std::size_t>(1, n / std::max<std::size_t>(min_chunk, 1)));
    if (parts <= 1) {
      if (n) fn(0, n, 0);
      return;
    }
    {
      std::unique_lock lock(mu_);
      job_ = &fn;
      n_ = n;
      parts_ = parts;
      pending_ = parts - 1;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    fn(0, bound(0), 0);
    // Jobs are often short: spin briefly before sleeping.
    detail::spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return pending_.load() == 0; });
    job_ = nullptr;
  }

 private:
  std::size_t bound(std::size_t part) const { return n_ * (part + 1) / parts_; }

  void loop(std::size_t w) {
    std::uint64_t seen = 0;
    for (;;) {
      detail::spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      if (!job_ || w >= parts_) continue;
      const auto* fn = job_;
      const std::size_t begin = n_ * w / parts_, end = bound(w);
      lock.unlock();
      (*fn)(begin, end, w);
      lock.lock();
      if (pending_.fetch_sub(1) == 1) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::size_t threads_ = 1;
  bool stop_ = false;
  std::atomic<std::uint64_t> generation_{0};
  const std::function<void(std::size_t, std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t n_ = 0, parts_ = 1;
  std::atomic<std::size_t> pending_{0};
};

std::size_t default_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? hc : 1;
}

Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool();  // never destroyed: workers must outlive static destructors' users
    q->resize(default_threads());
    return q;
  }();
  return *p;
}

}  // namespace

void set_thread_count(std::size_t n) { pool().resize(n ? n : default_threads()); }

std::size_t thread_count() { return pool().threads(); }

void parallel_for(std::size_t n, std::size_t min_chunk,
                  const std::function<void(std::size_t, std::size_t, std::size_t)>& fn) {
  pool().run(n, min_chunk, fn);
}

}  // namespace qrepack
