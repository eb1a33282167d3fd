// Waiting inside the thread module: spin briefly (a futex sleep and wake-up costs tens of
// microseconds in a VM, more than many jobs take), then sleep on a condition variable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace qrepack::detail {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls pred() for about `budget`; true as soon as it holds, false when the budget is spent.
/// The budget is measured in time, not iterations: a pause instruction takes from 10 to 150
/// cycles depending on the CPU.
template <typename Pred>
bool spin_until(const Pred& pred,
                std::chrono::microseconds budget = std::chrono::microseconds(50)) {
  const auto end = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (pred()) return true;
      cpu_pause();
    }
    if (std::chrono::steady_clock::now() >= end) return pred();
  }
}

/// A condition that waiters sleep on and that is signalled without a system call when nobody
/// sleeps. The state pred() reads must be atomics stored (sequentially consistent) before
/// notify(); pred() must read them sequentially consistent too.
class Gate {
 public:
  template <typename Pred>
  void wait(const Pred& pred) {
    if (spin_until(pred)) return;
    std::unique_lock lock(mu_);
    sleepers_.fetch_add(1);
    cv_.wait(lock, pred);
    sleepers_.fetch_sub(1);
  }
  void notify() {
    if (sleepers_.load() == 0) return;  // a sleeper registers before its last check of pred
    { std::lock_guard lock(mu_); }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace qrepack::detail
