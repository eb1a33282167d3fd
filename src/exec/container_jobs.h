// The container targets' side of the executor (exec/file_jobs.h): a ContainerPlan's units cut
// into jobs (row blocks of a unit's pieces, byte ranges of a copy, row or element blocks of a
// cast), each read, encoded and written at its tensor's offset on any worker.
#pragma once

#include <cstdint>
#include <memory>

#include "exec/file_jobs.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/targets/container.h"

namespace qrepack {

/// The job source of `plan` (jobs of about `job_bytes` of decoded f32).
std::unique_ptr<FileJobSource> container_job_source(const Checkpoint& ck, const ContainerPlan& plan,
                                                    std::uint64_t job_bytes);

}  // namespace qrepack
