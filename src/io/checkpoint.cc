#include "qrepack/io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "core/check.h"
#include "core/tensor_name.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/core/checked.h"

namespace qrepack {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Names in `dir` that hold safetensors shards: "*.safetensors", not hidden (temp files), not
// directories; anything else of that name is refused when it is opened.
Result<std::vector<std::string>> shard_names_in(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(names, list_directory(dir));
  std::vector<std::string> out;
  for (std::string& name : names) {
    if (ends_with(name, ".safetensors") && name[0] != '.' &&
        path_kind((fs::path(dir) / name).string()) != PathKind::kDirectory) {
      out.push_back(std::move(name));
    }
  }
  return out;
}

// A shard named in an index must be a plain file name in the index's directory.
bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s.find('\\') == std::string::npos &&
         s != "." && s != "..";
}

}  // namespace

std::string shard_file_name(std::size_t i, std::size_t n) {
  if (n == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s.path());
  if (index_path_) out.push_back(*index_path_);
  return out;
}

TensorRef CheckpointTensors::operator[](std::size_t i) const {
  QR_CHECK(i < size_, "CheckpointTensors: position past the end");
  const auto s =
      static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) -
      1;
  return {s, &shards_[s].tensors()[i - first_[s]]};
}

std::optional<std::size_t> Checkpoint::index_of(std::string_view name) const {
  const CheckpointTensors all = tensors();
  return by_name_.find(name, [&all](std::size_t i) { return all[i].entry->name; });
}

std::optional<TensorRef> Checkpoint::find(std::string_view name) const {
  const auto i = index_of(name);
  if (!i) return std::nullopt;
  return tensors()[*i];
}

Status Checkpoint::index_tensors() {
  std::size_t count = 0;
  for (const auto& shard : shards_) count += shard.tensors().size();
  if (count > std::numeric_limits<std::uint32_t>::max()) {
    return Error(ErrorKind::kLimitExceeded, fmt::format("{} tensors, over 2^32", count))
        .in_file(directory_);
  }
  shard_first_.reserve(shards_.size());
  for (const SafetensorsFile& shard : shards_) {
    shard_first_.push_back(tensor_count_);
    tensor_count_ += shard.tensors().size();
    for (const TensorEntry& e : shard.tensors()) total_size_ += e.byte_size();
  }
  // Name order, first occurrence first: 4 bytes per tensor (the names are the shards').
  const CheckpointTensors all = tensors();
  const auto name_of = [&all](std::size_t i) { return all[i].entry->name; };
  by_name_ = NameIndex::build(count, name_of);
  if (const auto repeat = by_name_.first_repeat(name_of)) {
    const TensorRef first = all[repeat->first];
    const TensorRef again = all[repeat->second];
    return Error(ErrorKind::kDuplicateTensor,
                 fmt::format("also present in {}", shards_[first.shard].path()))
        .in_file(shards_[again.shard].path())
        .in_tensor(again.entry->name)
        .with_rule("checkpoint.unique_names");
  }
  return ok_status();
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  const PathKind kind = path_kind(path);
  if (kind == PathKind::kMissing) {
    return Error(ErrorKind::kInputNotFound, "no such file or directory").in_file(path);
  }
  Checkpoint ck;
  std::vector<std::string> shard_files;
  if (kind == PathKind::kDirectory) {
    ck.directory_ = path;
    const std::string index = (fs::path(path) / kIndexFileName).string();
    if (path_kind(index) != PathKind::kMissing) {
      ck.index_path_ = index;  // opened below: a loop or a FIFO there is a clear error
    } else {
      QR_ASSIGN_OR_RETURN(names, shard_names_in(path));
      for (const std::string& name : names) shard_files.push_back((fs::path(path) / name).string());
      if (shard_files.empty()) {
        return Error(ErrorKind::kNoTensorFiles,
                     fmt::format("directory has neither {} nor any .safetensors file",
                                 kIndexFileName))
            .in_file(path);
      }
    }
  } else if (ends_with(path, ".json")) {
    ck.index_path_ = path;
    ck.directory_ = fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : ".";
  } else {
    ck.directory_ = fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : ".";
    shard_files.push_back(path);
  }

  std::map<std::string, std::string, std::less<>> weight_map;
  std::optional<std::uint64_t> declared_total;
  if (ck.index_path_) {
    const std::string& ip = *ck.index_path_;
    QR_ASSIGN_OR_RETURN(text, read_small_file(ip, kMaxIndexBytes, ErrorKind::kInvalidIndex));
    auto parsed = parse_json_strict(text, ErrorKind::kInvalidIndex);
    if (!parsed.ok()) return std::move(parsed.error().in_file(ip));
    const nlohmann::json& root = parsed.value();
    if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
      return Error(ErrorKind::kInvalidIndex, "index has no \"weight_map\" object")
          .in_file(ip)
          .with_rule("index.weight_map");
    }
    std::set<std::string> files;
    for (const auto& [name, shard] : root["weight_map"].items()) {
      if (Status named = check_tensor_name(name, ErrorKind::kInvalidIndex); !named.ok()) {
        return std::move(named.error().in_file(ip));
      }
      if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
        return Error(ErrorKind::kInvalidIndex,
                     fmt::format("weight_map value {} is not a file name in the index's directory",
                                 shard.dump()))
            .in_file(ip)
            .in_tensor(name)
            .with_rule("index.shard_name");
      }
      weight_map.emplace(name, shard.get<std::string>());
      files.insert(shard.get<std::string>());
    }
    if (root.contains("metadata")) {
      const auto& md = root["metadata"];
      if (!md.is_object()) {
        return Error(ErrorKind::kInvalidIndex, "\"metadata\" is not an object").in_file(ip);
      }
      if (md.contains("total_size")) {
        // transformers writes an integer; some tools write it as a float with no fraction.
        const auto& ts = md["total_size"];
        if (ts.is_number_unsigned()) {
          declared_total = ts.get<std::uint64_t>();
        } else if (ts.is_number_float() && ts.get<double>() >= 0 &&
                   ts.get<double>() ==
                       static_cast<double>(static_cast<std::uint64_t>(ts.get<double>()))) {
          declared_total = static_cast<std::uint64_t>(ts.get<double>());
        } else {
          ck.warnings_.push_back(fmt::format(
              "{}: metadata.total_size {} is not a byte count (ignored: no loader reads it; rule "
              "index.total_size)",
              ip, ts.dump().substr(0, 64)));
        }
      }
    }
    // A shard file beside the index that the index never names would be silently ignored:
    // refuse it instead (a stale or partial download is the usual cause).
    if (path_kind(ck.directory_) == PathKind::kDirectory) {
      QR_ASSIGN_OR_RETURN(names, shard_names_in(ck.directory_));
      for (const std::string& name : names) {
        if (!files.contains(name)) {
          return Error(ErrorKind::kShardNotInIndex,
                       fmt::format("{} is in the directory but the index names none of its "
                                   "tensors",
                                   name))
              .in_file(ip)
              .with_rule("index.covers_directory");
        }
      }
    }
    for (const std::string& f : files) {
      const std::string full = (fs::path(ck.directory_) / f).string();
      if (path_kind(full) == PathKind::kMissing) {
        return Error(ErrorKind::kShardMissing,
                     fmt::format("shard {} named in the index does not exist", f))
            .in_file(ip)
            .with_rule("index.shards_exist");
      }
      shard_files.push_back(full);
    }
  }

  for (const std::string& f : shard_files) {
    QR_ASSIGN_OR_RETURN(file, SafetensorsFile::open(f));
    ck.shards_.push_back(std::move(file));
  }
  QR_TRY(ck.index_tensors());

  if (ck.index_path_) {
    const std::string& ip = *ck.index_path_;
    for (const auto& [name, shard] : weight_map) {
      const auto ref = ck.find(name);
      const std::string want = (fs::path(ck.directory_) / shard).string();
      if (!ref || ck.shards_[ref->shard].path() != want) {
        return Error(ErrorKind::kTensorMissingFromShard,
                     fmt::format("the index places it in {}, which does not hold it", shard))
            .in_file(ip)
            .in_tensor(name)
            .with_rule("index.entries_exist");
      }
    }
    for (const TensorRef t : ck.tensors()) {
      if (!weight_map.contains(t.entry->name)) {
        return Error(ErrorKind::kTensorNotInIndex,
                     fmt::format("present in {} but absent from the index's weight_map",
                                 fs::path(ck.shards_[t.shard].path()).filename().string()))
            .in_file(ip)
            .in_tensor(t.entry->name)
            .with_rule("index.covers_shards");
      }
    }
    if (declared_total && *declared_total != ck.total_size_) {
      // transformers ignores the field when it loads; the bytes come from the shard headers,
      // which are checked strictly. Reported, not refused.
      ck.warnings_.push_back(fmt::format(
          "{}: metadata.total_size is {} but the tensors hold {} bytes (ignored: no loader reads "
          "it; rule index.total_size)",
          ip, *declared_total, ck.total_size_));
    }
  }
  return ck;
}

}  // namespace qrepack
