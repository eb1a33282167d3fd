// The one place qrepack starts threads. A process-wide pool of persistent workers runs
// parallel_for: [0, n) is cut into one contiguous range per thread (deterministic: the same n
// and thread count always give the same ranges), the caller's thread takes the first range,
// and the call returns when every range is done. Kernels never start threads; the executors
// call parallel_for with row ranges, so output bytes do not depend on the thread count.
#pragma once

#include <cstddef>
#include <functional>

namespace qrepack {

/// Sets the number of threads parallel_for uses (0 = every core the machine reports). Not to
/// be called while a parallel_for runs.
void set_thread_count(std::size_t n);
/// The number of threads parallel_for uses.
std::size_t thread_count();

/// Calls fn(begin, end, worker) for disjoint ranges covering [0, n), worker in
/// [0, thread_count()). Ranges shorter than `min_chunk` are not split further. fn must not
/// throw and must not call parallel_for.
void parallel_for(
    std::size_t n, std::size_t min_chunk,
    const std::function<void(std::size_t begin, std::size_t end, std::size_t worker)>& fn);

}  // namespace qrepack
