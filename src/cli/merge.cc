// `qrepack merge OUT`: completes a sharded run. Every worker's part file must be there with
// the same parameters, source and plan; every output shard must be recorded by exactly one
// part and still have its checksum. The conversion then reruns in resume mode, which reuses
// every shard and writes the index, the manifest and the side files exactly as a single run
// would: the directory is byte-identical to one made by a single process.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "cli/command.h"
#include "cli/convert_cli.h"
#include "exec/run_state.h"
#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::cli {
namespace fs = std::filesystem;

Result<ShardTask> parse_shard_task(const std::string& text) {
  const std::size_t slash = text.find('/');
  const auto i = parse_decimal(std::string_view(text).substr(0, slash), 6);
  const auto n = slash == std::string::npos
                     ? std::nullopt
                     : parse_decimal(std::string_view(text).substr(slash + 1), 6);
  if (!i || !n) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--shard must be I/N (worker I of N, 0-based), got \"{}\"", text));
  }
  ShardTask t{*i, *n};
  if (t.count == 0 || t.index >= t.count) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--shard {}: I must be in 0..N-1 and N at least 1", text));
  }
  return t;
}

namespace {

struct MergeCli {
  std::string out;
  std::size_t threads = 0;
};

Error mismatch(const std::string& file, const std::string& what) {
  return Error(ErrorKind::kParameterMismatch,
               fmt::format("{} differs from part 0's: every worker must run the same convert "
                           "command with only --shard changed",
                           what))
      .in_file(file)
      .with_rule("merge.same_run");
}

// A container target's --bits, as container_parameters recorded them.
std::string container_bits(const nlohmann::json& p) {
  std::string bits;
  for (const auto& [key, name] : {std::pair{"expert_bits", "experts"},
                                  {"down_bits", "down"},
                                  {"attn_bits", "attn"},
                                  {"mla_bits", "mla"},
                                  {"head_bits", "head"}}) {
    const auto b = p.at(key).get<std::uint64_t>();
    if (b) bits += fmt::format("{}{}={}", bits.empty() ? "" : ",", name, b);
  }
  return bits;
}

// The convert options a part recorded (its parameters), to finish the run in resume mode.
Result<ConvertCli> convert_options(const nlohmann::json& part, const std::string& out) {
  const auto& p = part.at("parameters");
  ConvertCli c;
  c.source = part.at("source").get<std::string>();
  c.out = out;
  c.to = p.at("to").get<std::string>();
  c.resume = true;
  if (p.contains("expert_bits")) {  // a container target (run_state checked the fields)
    c.target = p.at("target").get<std::string>();
    c.bits = container_bits(p);
    if (const auto g = p.at("down_group").get<std::uint64_t>()) c.down_group = std::to_string(g);
    // A GGUF source's flags (the checkpoint does not carry them).
    if (p.contains("norm_topk_prob") && p["norm_topk_prob"].is_boolean()) {
      c.norm_topk_prob = p["norm_topk_prob"].get<bool>();
    }
    if (p.contains("qk_permuted") && p["qk_permuted"].is_boolean()) {
      c.qk_permuted = p["qk_permuted"].get<bool>();
    }
    // --mtp-only takes its scheme from the base container, never from flags.
    if (p.contains("mtp_base") && p["mtp_base"].is_string()) {
      c.mtp_only = true;
      c.base_container = p["mtp_base"].get<std::string>();
      c.to.clear();
      c.bits.clear();
      c.down_group.clear();
    }
    return c;
  }
  if (p.contains("target")) c.target = p.at("target").get<std::string>();
  std::string bits;
  for (const auto& [cls, b] : p.at("bits").items()) {
    bits += fmt::format("{}{}={}", bits.empty() ? "" : ",", cls,
                        b.is_string() ? b.get<std::string>() : std::to_string(b.get<int>()));
  }
  c.bits = bits;
  c.select = p.at("select").get<std::string>();
  c.drop = p.at("drop").get<std::string>();
  c.keep_unknown = p.at("keep_unknown").get<bool>();
  c.keep_mtp = p.at("keep_mtp").get<bool>();
  c.keep_indexer = p.at("keep_indexer").get<bool>();
  c.unfuse = p.at("unfuse_experts").get<bool>();
  c.no_coverage = !p.at("coverage_gate").get<bool>();
  c.max_shard_size = std::to_string(p.at("max_shard_bytes").get<std::uint64_t>());
  c.resume = true;
  return c;
}

// (I, N) of ".qrepack-part-I-of-N.json" (part_file_name's form), or nullopt.
std::optional<std::pair<std::size_t, std::size_t>> parse_part_file_name(std::string_view name) {
  constexpr std::string_view kPrefix = ".qrepack-part-", kMid = "-of-", kSuffix = ".json";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const std::size_t mid = name.find(kMid);
  if (mid == std::string_view::npos) return std::nullopt;
  const auto i = parse_decimal(name.substr(0, mid), 6);
  const auto n = parse_decimal(name.substr(mid + kMid.size()), 6);
  if (!i || !n || *n == 0 || *i >= *n) return std::nullopt;
  return std::pair<std::size_t, std::size_t>(*i, *n);
}

Status run_merge(const MergeCli& m) {
  std::map<std::size_t, std::pair<std::string, nlohmann::json>> parts;
  std::error_code ec;
  std::size_t count = 0;
  auto listed = list_directory(m.out);
  for (const std::string& name : listed.ok() ? *listed : std::vector<std::string>{}) {
    const fs::path entry = fs::path(m.out) / name;
    const auto part = parse_part_file_name(name);
    if (!part) continue;
    const auto [i, n] = *part;
    if (count && n != count) {
      return Error(ErrorKind::kParameterMismatch,
                   fmt::format("parts of {} and of {} workers are mixed", count, n))
          .in_file(m.out)
          .with_rule("merge.same_run");
    }
    count = n;
    QR_ASSIGN_OR_RETURN(j, read_run_state(entry.string(), RunStateKind::kPart));
    parts[i] = {entry.string(), std::move(j)};
  }
  if (!listed.ok() || parts.empty()) {
    return Error(ErrorKind::kInputNotFound,
                 "no .qrepack-part-I-of-N.json files: run 'qrepack convert ... --shard I/N' for "
                 "every I first")
        .in_file(m.out)
        .with_rule("merge.parts");
  }
  std::vector<std::string> missing_parts;
  for (std::size_t i = 0; i < count; ++i) {
    if (!parts.count(i)) missing_parts.push_back(fmt::format("{}/{}", i, count));
  }
  if (!missing_parts.empty()) {
    return Error(ErrorKind::kMissingTensors,
                 fmt::format("{} of {} parts are missing: --shard {}", missing_parts.size(), count,
                             fmt::join(missing_parts, ", ")))
        .in_file(m.out)
        .with_rule("merge.parts");
  }
  const auto& [file0, p0] = parts.begin()->second;
  std::map<std::string, std::pair<std::size_t, nlohmann::json>> shards;  // file -> (part, rec)
  for (const auto& [i, fp] : parts) {
    const auto& [file, p] = fp;
    for (const char* key : {"parameters", "fingerprint", "source", "plan_shards"}) {
      if (!p.contains(key) || p[key] != p0[key]) return mismatch(file, key);
    }
    for (const auto& [f, rec] : p.at("shards").items()) {
      if (shards.count(f)) {
        return Error(ErrorKind::kParameterMismatch,
                     fmt::format("shard {} is claimed by parts {} and {}", f, shards[f].first, i))
            .in_file(file)
            .with_rule("merge.disjoint");
      }
      shards[f] = {i, rec};
    }
  }
  std::vector<std::string> missing;
  for (const auto& f : p0.at("plan_shards")) {
    if (!shards.count(f.get<std::string>())) missing.push_back(f.get<std::string>());
  }
  if (!missing.empty()) {
    return Error(ErrorKind::kMissingTensors,
                 fmt::format("{} output shard(s) not finished by any part, e.g. {}; rerun the "
                             "worker that owns them (it resumes)",
                             missing.size(), missing.front()))
        .in_file(m.out)
        .with_rule("merge.complete");
  }
  for (const auto& [f, pr] : shards) {
    const std::string path = (fs::path(m.out) / f).string();
    QR_ASSIGN_OR_RETURN(src, FileSource::open(path));
    QR_ASSIGN_OR_RETURN(h, xxhash64_of(*src));
    if (fmt::format("{:016x}", h) != pr.second.value("xxhash64", "")) {
      return Error(ErrorKind::kVerificationFailed,
                   fmt::format("checksum differs from what part {} recorded; rerun that worker",
                               pr.first))
          .in_file(path)
          .with_rule("merge.checksum");
    }
  }
  nlohmann::ordered_json progress = {{"parameters", p0["parameters"]},
                                     {"fingerprint", p0["fingerprint"]},
                                     {"shards", nlohmann::json::object()}};
  for (const auto& [f, pr] : shards) progress["shards"][f] = pr.second;
  QR_TRY(write_json_file((fs::path(m.out) / kProgressFileName).string(), progress));
  QR_ASSIGN_OR_RETURN(c, convert_options(p0, m.out));
  set_thread_count(m.threads);
  QR_TRY(run_convert(c));
  for (const auto& [i, fp] : parts) fs::remove(fp.first, ec);
  fmt::print("merged {} parts ({} output files) into {}\n", count, shards.size(), m.out);
  return ok_status();
}

}  // namespace

Action add_merge(CLI::App& sub) {
  auto c = std::make_shared<MergeCli>();
  sub.add_option("OUT", c->out, "Output directory the --shard workers wrote")->required();
  add_threads_option(sub, c->threads);
  return [c] { return run_merge(*c); };
}

}  // namespace qrepack::cli
