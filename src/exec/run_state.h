// The state files a resumable run leaves in its output directory (--resume's
// .qrepack-progress.json, --shard's .qrepack-part-I-of-N.json), read back with every field
// checked for the type qrepack uses it as: a damaged or hand-edited file is one clear error,
// never an exception.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {

enum class RunStateKind { kProgress, kPart };

/// Reads `path` strictly (io/json_file) and checks its schema: parameters (to, bits, select,
/// drop, the boolean flags, max_shard_bytes; for a container target: target, to and the
/// --bits widths of container_parameters), fingerprint, shards {file: {xxhash64, tensors
/// {name: xxhash64}}}, and for a part also part {index, count}, source and plan_shards.
/// Errors are kParameterMismatch naming the file and the field.
Result<nlohmann::json> read_run_state(const std::string& path, RunStateKind kind);

/// What identifies the source's files between a run and its --resume: each file's name, size
/// and modification time (a remote file: its name and size; the revision is in its path).
/// Not part of the plan's fingerprint: the workers of --shard read copies on other machines.
nlohmann::json source_stamp(const std::vector<std::string>& files);

/// Refuses (kParameterMismatch, rule resume.same_source) a state file `prev` whose recorded
/// source_stamp differs from `now`, naming the first file that differs.
Status check_source_stamp(const nlohmann::json& prev, const nlohmann::json& now,
                          const std::string& path);

/// Feeds `ck`'s tensor table (name, dtype, shape, bytes of every tensor) into `st`: the source
/// half of a run's plan fingerprint, the same for every kind of output.
void hash_source_headers(XXH64_state_t* st, const Checkpoint& ck);

/// The value of exactly 16 lower-case hex digits (how state files write xxhash64), or nullopt.
std::optional<std::uint64_t> parse_hex64(std::string_view text);

/// Cap on a state file's size (one record per output tensor: GLM-5.2's 117k need ~15 MB).
inline constexpr std::uint64_t kMaxRunStateBytes = 256ull << 20;
/// Cap on a qrepack.json manifest read back by --resume (about 300 bytes per output tensor).
inline constexpr std::uint64_t kMaxManifestBytes = 1ull << 30;

}  // namespace qrepack
