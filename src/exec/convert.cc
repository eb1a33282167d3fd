#include "qrepack/exec/convert.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <unordered_map>

#include "core/version.h"
#include "exec/entry_jobs.h"
#include "exec/file_run_state.h"
#include "exec/finished_shards.h"
#include "exec/hashing_output.h"
#include "exec/manifest.h"
#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "io/json_stream.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/io/checkpoint_writer.h"
#include "qrepack/io/output_txn.h"
#include "qrepack/io/side_files.h"
#include "qrepack/verify/container_format.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// Identifies the output layout: any change of source header, plan or shard split changes it.
std::string plan_fingerprint(const Checkpoint& ck, const ShardPlan& shards) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  auto feed = [&](const std::string& s) { XXH64_update(st, s.data(), s.size() + 1); };
  hash_source_headers(st, ck);
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    feed(shards.file_names[s]);
    for (const auto& t : shards.layouts[s].tensors) {
      feed(fmt::format("{}|{}|{}", t.name, static_cast<int>(t.dtype), fmt::join(t.shape, ",")));
    }
  }
  const std::uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return fmt::format("{:016x}", h);
}

// The progress line of a run: its source bytes, and what a remote source has received.
std::unique_ptr<ProgressLine> progress_line(const Checkpoint& ck, const ConvertPlan& plan,
                                            const ConvertOptions& o) {
  auto progress = std::make_unique<ProgressLine>(source_bytes(plan), o.progress);
  if (remote::is_remote_path(ck.directory())) {
    progress->set_extra([] {
      const remote::TransferTotals t = remote::transfer_totals();
      return fmt::format("[received {:.1f} MB, {} retries]", static_cast<double>(t.bytes) / 1e6,
                         t.retries);
    });
  }
  return progress;
}

// The manifest, the side files and (for more than one shard) the index, in that order, once
// every shard is final: a directory with an index is a complete one.
Status publish_finishing_files(const Checkpoint& ck, const ConvertPlan& plan,
                               const nlohmann::json& parameters, const std::string& out_dir,
                               const OutputHashes& hashes, const ShardPlan& shards) {
  QR_ASSIGN_OR_RETURN(
      manifest, write_manifest((fs::path(out_dir) / "qrepack.json").string(), ck, plan, parameters,
                               hashes, shards, ConvertPass::kMain));
  QR_TRY(manifest->prepare());
  QR_ASSIGN_OR_RETURN(side, stage_side_files(ck.directory(), out_dir));
  std::unique_ptr<AtomicFileSink> index;
  if (shards.layouts.size() > 1) {
    std::vector<std::pair<std::string_view, std::string_view>> names;
    for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
      for (const TensorView& t : shards.layouts[s].tensors) {
        names.emplace_back(t.name, shards.file_names[s]);
      }
    }
    QR_ASSIGN_OR_RETURN(sink, prepare_index_file(out_dir, shards.total_size, std::move(names)));
    index = std::move(sink);
  }
  QR_TRY(manifest->publish());
  for (auto& f : side) QR_TRY(f->publish());
  if (index) QR_TRY(index->publish());
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<AtomicFileSink>> write_manifest(const std::string& path,
                                                       const Checkpoint& ck,
                                                       const ConvertPlan& plan,
                                                       const nlohmann::json& parameters,
                                                       const OutputHashes& out,
                                                       const ShardPlan& shards, ConvertPass pass) {
  // Streamed record by record: the manifest's DOM would grow with the tensor count.
  QR_ASSIGN_OR_RETURN(manifest, AtomicFileSink::create(path));
  JsonObjectStream js(*manifest, 1);
  QR_TRY(js.member("qrepack_version", nlohmann::json(kVersion)));
  if (pass != ConvertPass::kMain)
    QR_TRY(js.member("pass", nlohmann::json(convert_pass_name(pass))));
  QR_TRY(js.member("parameters", parameters));
  QR_TRY(js.member(
      "source",
      nlohmann::ordered_json{
          {"path", ck.directory()},
          {"remote", remote::remote_source_record(ck.directory())},
          {"tensors", ck.tensors().size()},
          {"bytes", ck.total_size()},
          {"family", plan.family ? nlohmann::json(plan.family->name) : nlohmann::json()},
          {"model_type", plan.config ? nlohmann::json(plan.config->model_type) : nlohmann::json()},
          {"coverage_checked", plan.coverage_checked},
          {"warnings", plan.warnings}}));
  QR_TRY(js.begin_array("sources"));
  for (const std::uint32_t si : ck.by_name()) {
    const SourceRecord& s = plan.sources[si];
    nlohmann::json outputs = nlohmann::json::array();
    if (!s.consumed_by.empty()) outputs.push_back(s.consumed_by);
    for (const std::size_t i : s.outputs) outputs.push_back(plan.outputs[i].name);
    QR_TRY(js.item(nlohmann::ordered_json{{"name", ck.tensors()[si].entry->name},
                                          {"disposition", source_disposition_name(s.disposition)},
                                          {"rule", std::string(plan.rule_of(s))},
                                          {"outputs", std::move(outputs)}}));
  }
  QR_TRY(js.end());
  QR_TRY(js.begin_array("outputs"));
  for (const PlanEntry& e : plan.entries) {
    for (std::size_t i : e.outputs) {
      const TensorView& t = plan.outputs[i];
      QR_ASSIGN_OR_RETURN(hash, out.hash_of(i));
      const std::uint64_t bytes = data_bytes(t);
      nlohmann::ordered_json rec{{"name", t.name},
                                 {"dtype", dtype_info(t.dtype).safetensors},
                                 {"shape", t.shape},
                                 {"bytes", bytes},
                                 {"encoding", entry_encoding_name(e)},
                                 {"group", e.group},
                                 {"class", weight_class_name(e.cls)},
                                 {"rule", std::string(e.rule)},
                                 {"shard", shards.file_names[shards.shard_of(i)]},
                                 {"xxhash64", fmt::format("{:016x}", hash)}};
      if (e.stamped && i == e.outputs[0]) rec["stamp"] = kFp8StampName;
      QR_TRY(js.item(rec));
    }
  }
  QR_TRY(js.end());
  QR_TRY(js.finish());
  return manifest;
}

Result<ShardPlan> plan_output_shards(const ConvertPlan& plan, std::uint64_t max_shard_bytes,
                                     std::string_view prefix) {
  const std::map<std::string, std::string> base{{"format", "pt"}};
  QR_ASSIGN_OR_RETURN(shards, plan_shards_view(plan.outputs, max_shard_bytes, base, prefix));
  if (plan.stamped == 0) return shards;
  // fp8-passthrough: each shard names its stamped residents, and declares the format, in its
  // __metadata__ as the engine's FP8 repack does (keys sorted).
  std::unordered_map<std::string_view, bool> stamped;
  for (const PlanEntry& e : plan.entries) {
    if (e.stamped) stamped.emplace(plan.outputs[e.outputs[0]].name, true);
  }
  for (std::size_t s = 0; s < shards.layouts.size(); ++s) {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (const auto& t : shards.layouts[s].tensors) {
      if (stamped.contains(t.name)) map[t.name] = kFp8StampName;
    }
    auto md = base;
    md[std::string(kContainerFormatsKey)] =
        nlohmann::json::array({std::string(kFp8StampName)}).dump();
    md[std::string(kFormatStampKey)] = map.dump();
    QR_TRY(set_shard_metadata(shards, s, md));
  }
  return shards;
}

std::vector<bool> assign_output_shards(const std::vector<std::uint64_t>& shard_bytes,
                                       const ShardTask& task) {
  std::uint64_t total = 0;
  for (auto b : shard_bytes) total += b;
  std::vector<bool> mine(shard_bytes.size(), false);
  std::uint64_t before = 0;
  for (std::size_t s = 0; s < shard_bytes.size(); ++s) {
    // IEEE double: the same on every machine running this binary.
    const double mid = static_cast<double>(before) + static_cast<double>(shard_bytes[s]) / 2;
    const std::size_t owner = total ? static_cast<std::size_t>(mid / static_cast<double>(total) *
                                                               static_cast<double>(task.count))
                                    : s % task.count;
    mine[s] = std::min(owner, task.count - 1) == task.index;
    before += shard_bytes[s];
  }
  return mine;
}

std::string part_file_name(const ShardTask& task) {
  return fmt::format(".qrepack-part-{}-of-{}.json", task.index, task.count);
}

nlohmann::json conversion_parameters(const ConvertOptions& o) {
  nlohmann::json params;
  params["target"] = o.target ? o.target->name : "colibri-glm";
  params["to"] = o.scheme.name();
  nlohmann::json b = nlohmann::json::object();
  for (const auto& [name, bits] : resolved_bit_widths(o)) {
    if (bits == kE8Bits) {
      b[std::string(name)] = bits_label(bits);  // "e8"
    } else {
      b[std::string(name)] = bits;
    }
  }
  params["bits"] = b;
  params["select"] = o.select ? o.select->pattern() : std::string();
  params["drop"] = o.drop ? o.drop->pattern() : std::string();
  params["keep_unknown"] = o.keep_unknown;
  params["keep_mtp"] = o.keep_mtp;
  params["keep_indexer"] = o.keep_indexer;
  params["unfuse_experts"] = o.unfuse_only;
  params["coverage_gate"] = !o.skip_coverage;
  params["max_shard_bytes"] = o.max_shard_bytes;
  if (o.pass != ConvertPass::kMain) params["pass"] = convert_pass_name(o.pass);
  return params;
}

Result<ConvertReport> execute_conversion(const Checkpoint& ck, const ConvertPlan& plan,
                                         const ConvertOptions& o, const std::string& out_dir,
                                         bool resume, const ShardTask* shard) {
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json parameters = conversion_parameters(o);
  if (shard) resume = true;  // a worker reuses what it already published
  if (o.pass != ConvertPass::kMain) {
    if (resume || shard) {
      return Error(ErrorKind::kUsage, "--mtp and --indexer runs take neither --resume nor --shard");
    }
    return execute_pass(ck, plan, o, out_dir, parameters);
  }
  QR_ASSIGN_OR_RETURN(shards, plan_output_shards(plan, o.max_shard_bytes, {}));
  const std::size_t shard_count = shards.file_names.size();
  ConvertReport rep;
  rep.outputs = plan.outputs.size();
  rep.shards = shard_count;
  std::vector<bool> write(shard_count, true);
  OutputHashes hashes(shards);
  const std::string progress_path =
      (fs::path(out_dir) / (shard ? part_file_name(*shard) : std::string(kProgressFileName)))
          .string();
  nlohmann::ordered_json progress;
  if (resume) {
    std::error_code mkdir_error;
    fs::create_directories(out_dir, mkdir_error);
    if (mkdir_error) {
      return Error(ErrorKind::kIoOpen, "cannot create directory: " + mkdir_error.message())
          .in_file(out_dir);
    }
    const std::string fingerprint = plan_fingerprint(ck, shards);
    const nlohmann::json stamp = source_stamp(ck.files());
    progress = {{"parameters", parameters},
                {"fingerprint", fingerprint},
                {"source_stamp", stamp},
                {"shards", nlohmann::json::object()}};
    if (shard) {
      std::vector<std::uint64_t> sizes;
      for (const auto& l : shards.layouts) sizes.push_back(l.data_size);
      write = assign_output_shards(sizes, *shard);
      // The caller holds this part's lock: temp files of its shards are a dead run's.
      for (std::size_t si = 0; si < shard_count; ++si) {
        if (write[si]) remove_stale_temps(out_dir, shards.file_names[si]);
      }
      progress["part"] = {{"index", shard->index}, {"count", shard->count}};
      progress["source"] = ck.directory();
      progress["plan_shards"] = shards.file_names;
    }
    std::error_code ec;
    if (fs::exists(progress_path, ec)) {
      QR_ASSIGN_OR_RETURN(prev, read_run_state(progress_path, shard ? RunStateKind::kPart
                                                                    : RunStateKind::kProgress));
      QR_TRY(check_same_run(prev, parameters, fingerprint, stamp, progress_path));
      for (std::size_t s = 0; s < shard_count; ++s) {
        const std::string& f = shards.file_names[s];
        if (!prev["shards"].contains(f)) continue;
        const auto& rec = prev["shards"][f];
        auto file = FileSource::open((fs::path(out_dir) / f).string());
        if (!file.ok()) continue;  // gone: write it again
        QR_ASSIGN_OR_RETURN(h, xxhash64_of(**file));
        if (fmt::format("{:016x}", h) != rec["xxhash64"]) continue;  // damaged: redo
        const auto& tensors = shards.layouts[s].tensors;
        bool complete = true;
        for (const TensorView& t : tensors) complete = complete && rec["tensors"].contains(t.name);
        if (!complete) continue;  // a record of another plan: redo
        for (std::size_t k = 0; k < tensors.size(); ++k) {
          const std::string th = rec["tensors"][std::string(tensors[k].name)];
          hashes.set(shards.first[s] + k, parse_hex64(th).value_or(0));  // checked
        }
        if (write[s]) ++rep.reused_shards;
        write[s] = false;
        progress["shards"][f] = rec;
      }
    } else if (!shard) {
      QR_ASSIGN_OR_RETURN(complete, resume_finished(out_dir, parameters));
      if (complete) {
        QR_ASSIGN_OR_RETURN(intact, keep_finished_shards(out_dir, shards, hashes, write, progress,
                                                         rep.reused_shards));
        if (intact) {  // killed after it finished, before the caller saw it: nothing to do
          rep.already_complete = true;
          rep.reused_shards = shard_count;
          return rep;
        }
      }
    }
    // Before any shard is published, so a run killed right after its first shard still
    // leaves a directory the next --resume recognises.
    QR_TRY(write_json_file(progress_path, progress));
  }
  for (const bool w : write) rep.shards_written += w;

  // A shard counts as done once the remote files it may have read hash to what the server
  // publishes: a later --resume must not reuse bytes made from a corrupt download.
  std::vector<std::pair<std::string, nlohmann::ordered_json>> pending;
  const auto record_pending = [&]() -> Status {
    if (pending.empty()) return ok_status();
    for (auto& [name, rec] : pending) progress["shards"][name] = std::move(rec);
    pending.clear();
    return write_json_file(progress_path, progress);
  };
  const auto on_done = [&](std::size_t s, std::uint64_t file_hash) -> Status {
    nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
    const auto& layout = shards.layouts[s];
    for (std::size_t k = 0; k < layout.tensors.size(); ++k) {
      QR_ASSIGN_OR_RETURN(hash, hashes.hash_of(shards.first[s] + k));
      tensors[std::string(layout.tensors[k].name)] = fmt::format("{:016x}", hash);
    }
    pending.emplace_back(shards.file_names[s],
                         nlohmann::ordered_json{{"xxhash64", fmt::format("{:016x}", file_hash)},
                                                {"tensors", std::move(tensors)}});
    return remote::read_files_verified() ? record_pending() : ok_status();
  };
  const auto progress_line_ = progress_line(ck, plan, o);
  QR_ASSIGN_OR_RETURN(
      read,
      write_shards(ck, plan, shards, write, out_dir, o.job_bytes, hashes, progress_line_.get(),
                   resume ? std::function<Status(std::size_t, std::uint64_t)>(on_done) : nullptr));
  rep.bytes_read = read;
  rep.bytes_written = hashes.written();
  if (remote::is_remote_path(ck.directory())) {
    // Nothing is published from bytes that do not hash to what the server publishes.
    progress_line_->update("checking the source files' SHA-256", rep.bytes_read);
    QR_TRY(remote::verify_opened_files(shard != nullptr));
  }
  if (resume) QR_TRY(record_pending());
  progress_line_->update("writing the manifest and index", rep.bytes_read);
  progress_line_->finish();
  if (!shard) {  // a worker writes its shards only; merge writes the rest
    QR_TRY(publish_finishing_files(ck, plan, parameters, out_dir, hashes, shards));
    if (resume) {
      std::error_code ec;
      fs::remove(progress_path, ec);  // the run is complete: the manifest replaces the progress
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace qrepack
