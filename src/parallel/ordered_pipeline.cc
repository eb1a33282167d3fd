#include "qrepack/parallel/ordered_pipeline.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "parallel/spin_wait.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {
namespace {

struct Slot {
  std::atomic<std::size_t> ready{0};  ///< job + 1 once that job's produce has returned
  Status status = ok_status();
};

class Pipeline {
 public:
  Pipeline(std::size_t jobs, std::size_t slots,
           const std::function<Status(std::size_t, std::size_t, std::size_t)>& produce,
           const std::function<Status(std::size_t, std::size_t)>& consume)
      : jobs_(jobs),
        slots_(std::max<std::size_t>(1, slots)),
        slot_(std::make_unique<Slot[]>(slots_)),
        produce_(produce),
        consume_(consume) {}

  Status run() {
    parallel_for(thread_count(), 1, [&](std::size_t begin, std::size_t, std::size_t worker) {
      if (begin == 0) {
        consume_all(worker);  // the calling thread: parallel_for gives it the first range
      } else {
        produce_loop(worker);
      }
    });
    return std::move(result_);
  }

 private:
  void produce_job(std::size_t j, std::size_t worker) {
    Slot& s = slot_[j % slots_];
    s.status = produce_(j, j % slots_, worker);
    s.ready.store(j + 1);
    produced_.notify();
  }

  void produce_loop(std::size_t worker) {
    while (!stop_.load()) {
      const std::size_t j = next_.fetch_add(1);
      if (j >= jobs_) return;
      // Slot j % slots is free once job j - slots has been consumed.
      consumed_gate_.wait([&] { return stop_.load() || consumed_.load() + slots_ > j; });
      if (stop_.load()) return;
      produce_job(j, worker);
    }
  }

  // Claims the next unclaimed job if its slot is free without waiting (the job is fewer than
  // `slots` ahead of job c, the one being consumed).
  bool try_claim(std::size_t c, std::size_t& j) {
    j = next_.load();
    while (j < jobs_ && j < c + slots_) {
      if (next_.compare_exchange_weak(j, j + 1)) return true;
    }
    return false;
  }

  void consume_all(std::size_t worker) {
    for (std::size_t c = 0; c < jobs_; ++c) {
      Slot& s = slot_[c % slots_];
      while (s.ready.load() != c + 1) {
        std::size_t j;
        if (try_claim(c, j)) {
          produce_job(j, worker);
          continue;
        }
        // Every job that could be started now is claimed: wait for job c. (The unclaimed
        // ones only get further ahead of c while this thread waits.)
        produced_.wait([&] { return s.ready.load() == c + 1; });
      }
      Status st = s.status.ok() ? consume_(c, c % slots_) : std::move(s.status);
      if (!st.ok()) {
        result_ = std::move(st);
        break;
      }
      consumed_.store(c + 1);
      consumed_gate_.notify();
    }
    stop_.store(true);
    consumed_gate_.notify();
  }

  const std::size_t jobs_, slots_;
  std::unique_ptr<Slot[]> slot_;
  const std::function<Status(std::size_t, std::size_t, std::size_t)>& produce_;
  const std::function<Status(std::size_t, std::size_t)>& consume_;
  std::atomic<std::size_t> next_{0};      ///< the next job no thread has claimed
  std::atomic<std::size_t> consumed_{0};  ///< jobs consumed so far
  std::atomic<bool> stop_{false};
  detail::Gate produced_, consumed_gate_;
  Status result_ = ok_status();
};

}  // namespace

Status ordered_pipeline(std::size_t jobs, std::size_t slots,
                        const std::function<Status(std::size_t, std::size_t, std::size_t)>& produce,
                        const std::function<Status(std::size_t, std::size_t)>& consume) {
  if (jobs == 0) return ok_status();
  return Pipeline(jobs, slots, produce, consume).run();
}

}  // namespace qrepack
