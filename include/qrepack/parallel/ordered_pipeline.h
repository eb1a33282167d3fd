// An ordered producer/consumer pipeline on the thread pool: jobs 0..n-1 are produced in
// parallel (each independently: read, decode, encode into its slot's buffers) and consumed on
// the calling thread strictly in job order (append to the output). Job j always uses slot
// j % slots, and at most `slots` jobs are in flight, so per-slot buffers are reused and memory
// is bounded by the slot count whatever the number of jobs. The calling thread produces too
// whenever the next job in order is not ready yet, so `thread_count()` threads do all the work
// and none of them waits while there is something to do.
//
// Output depends only on what each job produces, never on which thread produced it or when:
// the bytes are identical for every thread count.
#pragma once

#include <cstddef>
#include <functional>

#include "qrepack/core/error.h"

namespace qrepack {

/// produce(job, slot, worker) runs on any pool thread (worker in [0, thread_count())), never
/// twice at once for one slot; consume(job, slot) runs on the calling thread in job order
/// after job's produce returned. The first failure in job order (a produce or a consume
/// failure) stops the pipeline and is returned; jobs after it may have been produced but are
/// never consumed. Neither callback may call parallel_for or ordered_pipeline.
Status ordered_pipeline(
    std::size_t jobs, std::size_t slots,
    const std::function<Status(std::size_t job, std::size_t slot, std::size_t worker)>& produce,
    const std::function<Status(std::size_t job, std::size_t slot)>& consume);

}  // namespace qrepack
