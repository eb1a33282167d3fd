#include "exec/run_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <filesystem>

#include "io/json_file.h"
#include "remote/paths.h"

namespace qrepack {
namespace {

using Json = nlohmann::json;

Error bad_field(const std::string& path, const std::string& field, const char* want) {
  return Error(ErrorKind::kParameterMismatch,
               fmt::format("field '{}' is missing or not {}: the file is damaged; remove the "
                           "output directory and convert again",
                           field, want))
      .in_file(path)
      .with_rule("run_state.schema");
}

bool is_hash(const Json& j) {
  return j.is_string() && parse_hex64(j.get_ref<const std::string&>());
}

// A container target's run (container_parameters): target and scheme, the --bits widths.
Status check_container_parameters(const Json& p, const std::string& path) {
  for (const char* s : {"target", "to"}) {
    if (!p.contains(s) || !p[s].is_string()) {
      return bad_field(path, fmt::format("parameters.{}", s), "a string");
    }
  }
  for (const char* n :
       {"expert_bits", "down_bits", "down_group", "attn_bits", "mla_bits", "head_bits"}) {
    if (!p.contains(n) || !p[n].is_number_unsigned()) {
      return bad_field(path, fmt::format("parameters.{}", n), "a non-negative integer");
    }
  }
  return ok_status();
}

Status check_parameters(const Json& p, const std::string& path) {
  if (!p.is_object()) return bad_field(path, "parameters", "an object");
  if (p.contains("expert_bits")) return check_container_parameters(p, path);
  for (const char* s : {"to", "select", "drop"}) {
    if (!p.contains(s) || !p[s].is_string()) {
      return bad_field(path, fmt::format("parameters.{}", s), "a string");
    }
  }
  for (const char* b :
       {"keep_unknown", "keep_mtp", "keep_indexer", "unfuse_experts", "coverage_gate"}) {
    if (!p.contains(b) || !p[b].is_boolean()) {
      return bad_field(path, fmt::format("parameters.{}", b), "true or false");
    }
  }
  if (!p.contains("max_shard_bytes") || !p["max_shard_bytes"].is_number_unsigned()) {
    return bad_field(path, "parameters.max_shard_bytes", "a non-negative integer");
  }
  if (!p.contains("bits") || !p["bits"].is_object()) {
    return bad_field(path, "parameters.bits", "an object");
  }
  for (const auto& [cls, b] : p["bits"].items()) {
    if (!(b.is_string() && b.get<std::string>() == "e8") &&
        (!b.is_number_unsigned() || b.get<std::uint64_t>() > 64)) {
      return bad_field(path, fmt::format("parameters.bits.{}", cls), "a bit width or \"e8\"");
    }
  }
  return ok_status();
}

Status check_shards(const Json& shards, const std::string& path) {
  if (!shards.is_object()) return bad_field(path, "shards", "an object");
  for (const auto& [file, rec] : shards.items()) {
    const std::string at = fmt::format("shards.{}", file);
    if (!rec.is_object()) return bad_field(path, at, "an object");
    if (!rec.contains("xxhash64") || !is_hash(rec["xxhash64"])) {
      return bad_field(path, at + ".xxhash64", "16 hex digits");
    }
    if (!rec.contains("tensors") || !rec["tensors"].is_object()) {
      return bad_field(path, at + ".tensors", "an object");
    }
    for (const auto& [name, h] : rec["tensors"].items()) {
      if (!is_hash(h))
        return bad_field(path, fmt::format("{}.tensors.{}", at, name), "16 hex digits");
    }
  }
  return ok_status();
}

Status check_part(const Json& j, const std::string& path) {
  if (!j.contains("part") || !j["part"].is_object()) return bad_field(path, "part", "an object");
  for (const char* k : {"index", "count"}) {
    if (!j["part"].contains(k) || !j["part"][k].is_number_unsigned()) {
      return bad_field(path, fmt::format("part.{}", k), "a non-negative integer");
    }
  }
  if (!j.contains("source") || !j["source"].is_string()) {
    return bad_field(path, "source", "a string");
  }
  if (!j.contains("plan_shards") || !j["plan_shards"].is_array()) {
    return bad_field(path, "plan_shards", "an array");
  }
  for (const auto& f : j["plan_shards"]) {
    if (!f.is_string()) return bad_field(path, "plan_shards[]", "a string");
  }
  return ok_status();
}

}  // namespace

std::optional<std::uint64_t> parse_hex64(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

void hash_source_headers(XXH64_state_t* st, const Checkpoint& ck) {
  for (const TensorRef t : ck.tensors()) {
    const std::string line =
        fmt::format("{}|{}|{}|{}", t.entry->name, static_cast<int>(t.entry->dtype),
                    fmt::join(t.entry->shape, ","), t.entry->byte_size());
    XXH64_update(st, line.data(), line.size() + 1);
  }
}

nlohmann::json source_stamp(const std::vector<std::string>& files) {
  Json out = Json::array();
  for (const std::string& f : files) {
    const std::string name = std::filesystem::path(f).filename().string();
    struct stat st {};
    if (remote::is_remote_path(f) || ::stat(f.c_str(), &st) != 0) {
      out.push_back({name, nullptr, nullptr});
      continue;
    }
    const auto ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ull +
                    static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
    out.push_back({name, static_cast<std::uint64_t>(st.st_size), ns});
  }
  return out;
}

Status check_source_stamp(const nlohmann::json& prev, const nlohmann::json& now,
                          const std::string& path) {
  if (!prev.contains("source_stamp") || prev["source_stamp"] == now) return ok_status();
  const Json& was = prev["source_stamp"];
  std::string what = "the list of source files";
  for (std::size_t i = 0; was.is_array() && i < was.size() && i < now.size(); ++i) {
    if (was[i] != now[i]) {
      what = fmt::format("source file {} (size or modification time)", now[i][0].dump());
      break;
    }
  }
  return Error(ErrorKind::kParameterMismatch,
               fmt::format("{} changed since the earlier partial run; its finished files were "
                           "made from the old source: use a new output directory",
                           what))
      .in_file(path)
      .with_rule("resume.same_source");
}

Result<nlohmann::json> read_run_state(const std::string& path, RunStateKind kind) {
  QR_ASSIGN_OR_RETURN(j, read_json_file(path, ErrorKind::kParameterMismatch, kMaxRunStateBytes));
  if (!j.is_object()) return bad_field(path, "(top level)", "an object");
  if (!j.contains("parameters")) return bad_field(path, "parameters", "an object");
  QR_TRY(check_parameters(j["parameters"], path));
  if (!j.contains("fingerprint") || !j["fingerprint"].is_string()) {
    return bad_field(path, "fingerprint", "a string");
  }
  if (!j.contains("shards")) return bad_field(path, "shards", "an object");
  QR_TRY(check_shards(j["shards"], path));
  if (kind == RunStateKind::kPart) QR_TRY(check_part(j, path));
  return j;
}

}  // namespace qrepack
