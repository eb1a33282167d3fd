// The file side of write_container: positioned writes, shards staged unchanged (hard link or
// copy, then SHA-256), side files, and the qrepack.json manifest of a container target.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/exec/container_exec.h"

namespace qrepack {

/// A container run's parameters as qrepack.json and the state files record them.
nlohmann::json container_parameters(const ContainerPlan& plan, const ContainerOptions& o);

/// Writes all of `bytes` at `offset` of `fd` (retrying short writes); errors name `path`.
Status pwrite_all(int fd, std::span<const std::uint8_t> bytes, std::uint64_t offset,
                  const std::string& path);

/// Copies `from` to the new file `to` (refused when it exists), fsynced.
Status copy_file_bytes(const std::string& from, const std::string& to);

/// colibri-llama: hard-links (else copies) each of plan.staged_shards into `out_dir`, checks
/// each staged file's SHA-256 against the source's, and writes plan.staged_meta's file.
Status stage_shards(const Checkpoint& ck, const ContainerPlan& plan, const std::string& out_dir,
                    ContainerReport& rep);

/// What the copy jobs of a run read: for unit u, the digest (xxh3 64) of each `chunk`-byte
/// piece of its source tensor in order; empty for a unit no job of this run copied.
struct CopyDigests {
  std::uint64_t chunk = 0;
  std::vector<std::vector<std::uint64_t>> of_unit;
};

/// Reads every tensor `plan` copied (kCopy units) back from `out_dir` and checks it against what
/// was read from the source (plan.verify_copies): each piece's digest against `digests` where
/// this run's jobs recorded it, else against the source re-read, byte for byte. A difference is
/// an error naming file and tensor.
Status verify_copied_tensors(const Checkpoint& ck, const ContainerPlan& plan,
                             const std::string& out_dir, const CopyDigests& digests);

/// Writes (or copies) every side file of `plan` into `out_dir`.
Status write_side_files(const ContainerPlan& plan, const std::string& out_dir);

/// OUT/qrepack.json: version, target and runtime, parameters, source, files, and what
/// happened to every source tensor.
Status write_container_manifest(const Checkpoint& ck, const ContainerPlan& plan,
                                const nlohmann::json& parameters, const std::string& out_dir,
                                const ContainerReport& rep);

/// The end every container manifest shares: `files`, bytes_written and what happened to each
/// source tensor, then `m` written to OUT/qrepack.json.
Status write_manifest_tail(nlohmann::ordered_json& m, nlohmann::ordered_json files,
                           std::uint64_t bytes_written, std::span<const ContainerSource> sources,
                           const std::string& out_dir);

/// Removes what a finishing run writes after the tensor files (staged shards, their meta file,
/// side files, qrepack.json) from `out_dir`: a resumed run that was killed while finishing
/// writes them again.
Status remove_finishing_files(const ContainerPlan& plan, const std::string& out_dir);

}  // namespace qrepack
