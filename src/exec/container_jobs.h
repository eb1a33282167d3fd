// The container targets' side of the executor (exec/file_jobs.h): a ContainerPlan's units cut
// into jobs (row blocks of a unit's pieces, byte ranges of a copy, row or element blocks of a
// cast), each read, encoded and written at its tensor's offset on any worker.
#pragma once

#include <cstdint>
#include <memory>

#include "exec/container_io.h"
#include "exec/file_jobs.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/targets/container.h"

namespace qrepack {

/// The container job source: FileJobSource, plus what its copy jobs read when the plan verifies
/// copies (plan.verify_copies).
class ContainerJobSource : public FileJobSource {
 public:
  /// A digest of each piece of every copied tensor this run wrote, from the bytes its job read
  /// from the source; empty for a tensor of a file this run did not write.
  virtual const CopyDigests& copy_digests() const = 0;
};

/// The job source of `plan` (jobs of about `job_bytes` of decoded f32).
std::unique_ptr<ContainerJobSource> container_job_source(const Checkpoint& ck,
                                                         const ContainerPlan& plan,
                                                         std::uint64_t job_bytes);

}  // namespace qrepack
