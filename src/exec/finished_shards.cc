#include "exec/finished_shards.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <unordered_map>

#include "exec/file_jobs.h"
#include "exec/run_state.h"
#include "io/json_file.h"
#include "qrepack/io/byte_source.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

bool at_planned_size(const std::string& path, const SafetensorsLayout& layout) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return !ec && size == layout.file_size();
}

// Every output's recorded xxhash64 (hex), by name, from the finished run's manifest.
Result<std::unordered_map<std::string, std::string>> recorded_hashes(const std::string& out_dir) {
  QR_ASSIGN_OR_RETURN(m, read_json_file((fs::path(out_dir) / "qrepack.json").string(),
                                        ErrorKind::kParameterMismatch, kMaxManifestBytes));
  std::unordered_map<std::string, std::string> out;
  if (!m.contains("outputs") || !m["outputs"].is_array()) return out;
  for (const auto& o : m["outputs"]) {
    if (o.is_object() && o.contains("name") && o["name"].is_string() && o.contains("xxhash64") &&
        o["xxhash64"].is_string()) {
      out[o["name"].get<std::string>()] = o["xxhash64"].get<std::string>();
    }
  }
  return out;
}

// Shard s's tensors hashed from its file; their records when every one matches `recorded`.
Result<std::optional<nlohmann::ordered_json>> verified_record(
    const std::string& path, const SafetensorsLayout& layout,
    const std::unordered_map<std::string, std::string>& recorded) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::uint64_t at = layout.header_size;
  for (const TensorView& t : layout.tensors) {
    ranges.emplace_back(at, data_bytes(t));
    at += data_bytes(t);
  }
  QR_ASSIGN_OR_RETURN(hashes, xxhash64_of_ranges(path, ranges));
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < layout.tensors.size(); ++k) {
    const std::string name(layout.tensors[k].name);
    const std::string hex = fmt::format("{:016x}", hashes[k]);
    const auto it = recorded.find(name);
    if (it == recorded.end() || it->second != hex) return std::optional<nlohmann::ordered_json>();
    tensors[name] = hex;
  }
  QR_ASSIGN_OR_RETURN(file, FileSource::open(path));
  QR_ASSIGN_OR_RETURN(h, xxhash64_of(*file));
  return std::optional<nlohmann::ordered_json>(
      nlohmann::ordered_json{{"xxhash64", fmt::format("{:016x}", h)}, {"tensors", tensors}});
}

}  // namespace

Result<bool> keep_finished_shards(const std::string& out_dir, const ShardPlan& shards,
                                  OutputHashes& hashes, std::vector<bool>& write,
                                  nlohmann::ordered_json& progress, std::size_t& reused) {
  const std::size_t count = shards.file_names.size();
  bool intact = count < 2 || fs::exists(fs::path(out_dir) / kIndexFileName);
  for (std::size_t s = 0; s < count && intact; ++s) {
    intact =
        at_planned_size((fs::path(out_dir) / shards.file_names[s]).string(), shards.layouts[s]);
  }
  if (intact) return true;
  QR_ASSIGN_OR_RETURN(recorded, recorded_hashes(out_dir));
  for (std::size_t s = 0; s < count; ++s) {
    const std::string path = (fs::path(out_dir) / shards.file_names[s]).string();
    if (!at_planned_size(path, shards.layouts[s])) continue;  // gone or resized: redo
    QR_ASSIGN_OR_RETURN(rec, verified_record(path, shards.layouts[s], recorded));
    if (!rec) continue;  // changed since the manifest: redo
    const auto& tensors = (*rec)["tensors"];
    for (std::size_t k = 0; k < shards.layouts[s].tensors.size(); ++k) {
      const std::string hex = tensors[std::string(shards.layouts[s].tensors[k].name)];
      hashes.set(shards.first[s] + k, parse_hex64(hex).value_or(0));  // formatted above
    }
    progress["shards"][shards.file_names[s]] = std::move(*rec);
    write[s] = false;
    ++reused;
  }
  return false;
}

}  // namespace qrepack
