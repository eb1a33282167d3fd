// Pieces of a conversion's output shared by the main run and the passes (convert_pass.cc):
// the streamed manifest and the shard plan with fp8-passthrough's format stamps.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "exec/hashing_output.h"
#include "qrepack/exec/convert.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack {

/// Streams the manifest (qrepack.json, or qrepack-<pass>.json with a "pass" member) into a
/// prepared, not yet visible, file at `path`. `shards` is plan_output_shards(plan, ...): its
/// specs are plan.outputs, in order.
Result<std::unique_ptr<AtomicFileSink>> write_manifest(const std::string& path,
                                                       const Checkpoint& ck,
                                                       const ConvertPlan& plan,
                                                       const nlohmann::json& parameters,
                                                       const OutputHashes& out,
                                                       const ShardPlan& shards, ConvertPass pass);

/// The output shards of `plan` ("format": "pt" in every header); with stamped entries, each
/// shard also carries __metadata__["colibri.fmt"] (its stamped tensors -> "fp8-e4m3-b128") and
/// __metadata__["colibri.container.formats"] = ["fp8-e4m3-b128"]. The plan views plan.outputs
/// (`plan` must outlive it).
Result<ShardPlan> plan_output_shards(const ConvertPlan& plan, std::uint64_t max_shard_bytes,
                                     std::string_view prefix);

/// The parameters a run records in its manifest and progress file (and a rerun or a finished
/// pass is compared by): the scheme, the resolved bits of every class and routed projection,
/// the name rules, the keep flags, the coverage gate, the shard size, the pass.
nlohmann::json conversion_parameters(const ConvertOptions& o);

/// A pass (--mtp, --indexer) into `out_dir`: see execute_conversion.
Result<ConvertReport> execute_pass(const Checkpoint& ck, const ConvertPlan& plan,
                                   const ConvertOptions& o, const std::string& out_dir,
                                   const nlohmann::json& parameters);

}  // namespace qrepack
