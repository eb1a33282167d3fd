#include "qrepack/io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/tensor_name.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/core/arena.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/name_index.h"
#include "remote/paths.h"

namespace qrepack {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Names in `dir` that hold safetensors shards: "*.safetensors", not hidden (temp files), not
// directories, not a Clef release's decision head (joint_head.safetensors: a separate model
// beside the checkpoint, copied by colibri-qwen36 as upstream does); anything else of that name
// is refused when it is opened.
Result<std::vector<std::string>> shard_names_in(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(names, list_directory(dir));
  std::vector<std::string> out;
  for (std::string& name : names) {
    if (ends_with(name, ".safetensors") && name[0] != '.' && name != "joint_head.safetensors" &&
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

namespace {

// An index's weight_map, compactly: names in an arena, a shard number each, found by a
// NameIndex (about 60 bytes a tensor instead of two strings in a tree node).
struct IndexMap {
  Arena arena;
  std::vector<std::string_view> names;
  std::vector<std::uint32_t> shard;  ///< into files
  std::vector<std::string> files;    ///< each shard file the index names, once, in first use
  NameIndex by_name;
  std::optional<std::size_t> find(std::string_view name) const {
    return by_name.find(name, [this](std::size_t i) { return names[i]; });
  }
};

// A JSON float with no fraction that a uint64 holds (checked before the cast: a double at or
// beyond 2^64 converted to an integer is undefined).
std::optional<std::uint64_t> whole_float(const nlohmann::json& v) {
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!(d >= 0.0 && d < 18446744073709551616.0) || d != std::floor(d)) return std::nullopt;
  return static_cast<std::uint64_t>(d);
}

// Reads the index's weight_map and metadata.total_size, streamed entry by entry (no DOM of
// 100k entries), checking each name and shard file name, and each name once.
Status read_index(const std::string& ip, std::string_view text, IndexMap& map,
                  std::optional<std::uint64_t>& declared_total,
                  std::vector<std::string>& warnings) {
  std::set<std::string> metadata_keys;
  const JsonNestedMemberFn on_entry = [&](const std::string& parent, const std::string& name,
                                          nlohmann::json&& shard) -> Status {
    if (parent == "metadata") {
      if (!metadata_keys.insert(name).second) {
        return Error(ErrorKind::kDuplicateKey, fmt::format("duplicate key \"{}\"", name))
            .with_rule("json.unique_keys");
      }
      if (name == "total_size") {
        // transformers writes an integer; some tools write it as a float with no fraction.
        if (shard.is_number_unsigned()) {
          declared_total = shard.get<std::uint64_t>();
        } else if (const auto whole = whole_float(shard)) {
          declared_total = *whole;
        } else {
          warnings.push_back(fmt::format(
              "{}: metadata.total_size {} is not a byte count (ignored: no loader reads it; rule "
              "index.total_size)",
              ip, shard.dump().substr(0, 64)));
        }
      }
      return ok_status();
    }
    if (parent != "weight_map") return ok_status();
    QR_TRY(check_tensor_name(name, ErrorKind::kInvalidIndex));
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
      return Error(ErrorKind::kInvalidIndex,
                   fmt::format("weight_map value {} is not a file name in the index's directory",
                               shard.dump().substr(0, 128)))
          .in_tensor(name)
          .with_rule("index.shard_name");
    }
    if (map.names.size() >= std::numeric_limits<std::uint32_t>::max()) {
      return Error(ErrorKind::kLimitExceeded, "over 2^32 weight_map entries")
          .with_rule("index.max_entries");
    }
    const std::string& file = shard.get_ref<const std::string&>();
    // Shard names repeat in runs (an index lists a shard's tensors together).
    std::size_t f = map.files.size();
    if (!map.files.empty() && map.files[map.shard.empty() ? 0 : map.shard.back()] == file) {
      f = map.shard.back();
    } else {
      f = static_cast<std::size_t>(std::find(map.files.begin(), map.files.end(), file) -
                                   map.files.begin());
      if (f == map.files.size()) map.files.push_back(file);
    }
    map.names.push_back(map.arena.copy(name));
    map.shard.push_back(static_cast<std::uint32_t>(f));
    return ok_status();
  };
  auto root = parse_json_strict_nested(
      text, ErrorKind::kInvalidIndex,
      Error(ErrorKind::kInvalidIndex, "index is not a JSON object").with_rule("index.weight_map"),
      on_entry);
  if (!root.ok()) return std::move(root.error().in_file(ip));
  if (!root->contains("weight_map") || !(*root)["weight_map"].is_object()) {
    return Error(ErrorKind::kInvalidIndex, "index has no \"weight_map\" object")
        .in_file(ip)
        .with_rule("index.weight_map");
  }
  if (root->contains("metadata") && !(*root)["metadata"].is_object()) {
    return Error(ErrorKind::kInvalidIndex, "\"metadata\" is not an object").in_file(ip);
  }
  map.by_name = NameIndex::build(map.names.size(), [&](std::size_t i) { return map.names[i]; });
  if (const auto rep = map.by_name.first_repeat([&](std::size_t i) { return map.names[i]; })) {
    return Error(ErrorKind::kDuplicateKey,
                 fmt::format("duplicate key \"{}\" in weight_map",
                             printable_name(map.names[rep->first].substr(0, 256))))
        .in_file(ip)
        .with_rule("json.unique_keys");
  }
  return ok_status();
}

}  // namespace

namespace {

// A remote URL as a local path: the repository's canonical base (its revision resolved), or
// base/FILE when the URL names a file of it.
Result<std::string> remote_checkpoint_path(const std::string& url) {
  const auto slash = url.find_last_of('/');
  const std::string last = slash == std::string::npos ? url : url.substr(slash + 1);
  const bool names_file =
      url.rfind("hf://", 0) != 0 && (ends_with(last, ".safetensors") || ends_with(last, ".json"));
  if (!names_file) return remote::open_remote_directory(url);
  QR_ASSIGN_OR_RETURN(base, remote::open_remote_directory(url.substr(0, slash + 1)));
  return base + "/" + last;
}

// Opens the shards, several at once for remote ones (each header is a round trip or two).
Result<std::vector<SafetensorsFile>> open_shards(const std::vector<std::string>& files) {
  std::vector<SafetensorsFile> out;
  out.reserve(files.size());
  if (files.empty() || !remote::is_remote_path(files[0])) {
    for (const std::string& f : files) {
      QR_ASSIGN_OR_RETURN(file, SafetensorsFile::open(f));
      out.push_back(std::move(file));
    }
    return out;
  }
  std::vector<std::optional<Result<SafetensorsFile>>> opened(files.size());
  std::atomic<std::size_t> next{0};
  const std::size_t workers = std::min<std::size_t>(8, files.size());
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < files.size();) {
        opened[i].emplace(SafetensorsFile::open(files[i]));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : opened) {
    if (!r->ok()) return std::move(*r).error();
    out.push_back(std::move(**r));
  }
  return out;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& given) { return open_holding(given, {}); }

Result<Checkpoint> Checkpoint::open_holding(const std::string& given,
                                            std::string_view name_prefix) {
  std::string path = given;
  if (remote::is_remote_path(given)) {
    QR_ASSIGN_OR_RETURN(p, remote_checkpoint_path(given));
    path = std::move(p);
  }
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

  IndexMap weight_map;
  std::optional<std::uint64_t> declared_total;
  std::vector<bool> wanted;  ///< per file of the index: opened
  if (ck.index_path_) {
    const std::string& ip = *ck.index_path_;
    QR_ASSIGN_OR_RETURN(text, read_small_file(ip, kMaxIndexBytes, ErrorKind::kInvalidIndex));
    QR_TRY(read_index(ip, text, weight_map, declared_total, ck.warnings_));
    { const std::string freed = std::move(text); }  // the names now live in the map's arena
    const auto& files = weight_map.files;
    // A shard file beside the index that the index never names would be silently ignored:
    // refuse it instead (a stale or partial download is the usual cause).
    if (path_kind(ck.directory_) == PathKind::kDirectory) {
      QR_ASSIGN_OR_RETURN(names, shard_names_in(ck.directory_));
      for (const std::string& name : names) {
        if (std::find(files.begin(), files.end(), name) == files.end()) {
          return Error(ErrorKind::kShardNotInIndex,
                       fmt::format("{} is in the directory but the index names none of its "
                                   "tensors",
                                   name))
              .in_file(ip)
              .with_rule("index.covers_directory");
        }
      }
    }
    // Shards are read in name order; with a prefix, only those holding a name with it.
    wanted.assign(files.size(), name_prefix.empty());
    for (std::size_t i = 0; i < weight_map.names.size() && !name_prefix.empty(); ++i) {
      if (weight_map.names[i].starts_with(name_prefix)) wanted[weight_map.shard[i]] = true;
    }
    std::vector<std::string> in_name_order;
    for (std::size_t f = 0; f < files.size(); ++f) {
      if (wanted[f]) in_name_order.push_back(files[f]);
    }
    std::sort(in_name_order.begin(), in_name_order.end());
    for (const std::string& f : in_name_order) {
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

  QR_ASSIGN_OR_RETURN(shards, open_shards(shard_files));
  ck.shards_ = std::move(shards);
  QR_TRY(ck.index_tensors());

  if (ck.index_path_) {
    const std::string& ip = *ck.index_path_;
    const bool subset = std::find(wanted.begin(), wanted.end(), false) != wanted.end();
    for (std::size_t i = 0; i < weight_map.names.size(); ++i) {
      const std::string_view name = weight_map.names[i];
      const std::string& shard = weight_map.files[weight_map.shard[i]];
      if (!wanted[weight_map.shard[i]]) continue;  // a shard not opened
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
      if (!weight_map.find(t.entry->name)) {
        return Error(ErrorKind::kTensorNotInIndex,
                     fmt::format("present in {} but absent from the index's weight_map",
                                 fs::path(ck.shards_[t.shard].path()).filename().string()))
            .in_file(ip)
            .in_tensor(t.entry->name)
            .with_rule("index.covers_shards");
      }
    }
    if (declared_total && !subset && *declared_total != ck.total_size_) {
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
