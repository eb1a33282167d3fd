// write_container (qrepack/exec/container_exec.h): which files a run writes (all; a worker's
// share; what an earlier run did not finish), the state files that record them, and the
// finishing steps (staged shards, side files, qrepack.json).
#include "qrepack/exec/container_exec.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "exec/container_io.h"
#include "exec/container_jobs.h"
#include "exec/file_run_state.h"
#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/io/output_txn.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// Identifies the output layout: any change of the source's headers or of the planned files
// changes it.
std::string container_fingerprint(const Checkpoint& ck, const ContainerPlan& plan,
                                  const std::vector<SafetensorsLayout>& layouts) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  auto feed = [&](const std::string& s) { XXH64_update(st, s.data(), s.size() + 1); };
  hash_source_headers(st, ck);
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    feed(plan.files[i].name);
    const auto header = safetensors_header_bytes(layouts[i]);
    XXH64_update(st, header.data(), header.size());
  }
  for (const std::string& s : plan.staged_shards) feed(fs::path(s).filename().string());
  for (const ContainerSideFile& f : plan.side_files) feed(f.name);
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", h);
}

// Each file's safetensors layout (header and data offsets), in plan order.
Result<std::vector<SafetensorsLayout>> container_layouts(const ContainerPlan& plan) {
  std::vector<SafetensorsLayout> out;
  out.reserve(plan.files.size());
  for (const ContainerFile& cf : plan.files) {
    QR_ASSIGN_OR_RETURN(
        layout, cf.metadata_last.empty()
                    ? plan_safetensors(cf.tensors, cf.metadata)
                    : plan_safetensors_metadata_last(cf.tensors, cf.metadata_last, cf.data_align));
    out.push_back(std::move(layout));
  }
  return out;
}

// Staged shards, side files and qrepack.json, after every tensor file.
Status finish(const Checkpoint& ck, const ContainerPlan& plan, const nlohmann::json& parameters,
              const std::string& out_dir, bool in_place, const CopyDigests& copies,
              ContainerReport& rep) {
  if (in_place) QR_TRY(remove_finishing_files(plan, out_dir));
  if (plan.verify_copies) QR_TRY(verify_copied_tensors(ck, plan, out_dir, copies));
  QR_TRY(stage_shards(ck, plan, out_dir, rep));
  QR_TRY(write_side_files(plan, out_dir));
  return write_container_manifest(ck, plan, parameters, out_dir, rep);
}

}  // namespace

nlohmann::json container_parameters(const ContainerPlan& plan, const ContainerOptions& o) {
  nlohmann::json p = {{"target", plan.target->name},  {"to", o.scheme},
                      {"expert_bits", o.expert_bits}, {"down_bits", o.down_bits},
                      {"down_group", o.down_group},   {"attn_bits", o.attn_bits},
                      {"mla_bits", o.mla_bits},       {"head_bits", o.head_bits}};
  if (!o.mtp_base.empty()) p["mtp_base"] = o.mtp_base;  // --mtp-only --base-container
  return p;
}

Result<ContainerReport> write_container(const Checkpoint& ck, const ContainerPlan& plan,
                                        const ContainerOptions& o, const std::string& out_dir,
                                        const ContainerRun& run) {
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json parameters = container_parameters(plan, o);
  QR_ASSIGN_OR_RETURN(layouts, container_layouts(plan));
  ContainerReport rep;
  rep.files = plan.files.size();
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    rep.bytes_written += layouts[i].file_size();
    rep.tensors += plan.files[i].tensors.size();
  }
  const bool in_place = run.resume || run.shard;
  std::vector<std::string> names;
  for (const ContainerFile& f : plan.files) names.push_back(f.name);
  QR_ASSIGN_OR_RETURN(
      fr, start_file_run(names, layouts, out_dir, run, ck.directory(), source_stamp(ck.files()),
                         parameters, [&] { return container_fingerprint(ck, plan, layouts); }));
  const auto source = container_job_source(ck, plan, o.job_bytes);
  QR_TRY(run_started_files(fr, output_files(names, layouts), out_dir, run.shard != nullptr, *source,
                           rep));
  if (rep.already_complete) return rep;
  if (!run.shard) {
    QR_TRY(finish(ck, plan, parameters, out_dir, in_place, source->copy_digests(), rep));
    if (fr.state) fr.state->remove();  // complete: the manifest replaces the progress file
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
