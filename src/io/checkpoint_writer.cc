#include "qrepack/io/checkpoint_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_stream.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/name_index.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {
namespace fs = std::filesystem;

std::size_t ShardPlan::shard_of(std::size_t i) const {
  const auto it = std::upper_bound(first.begin(), first.end(), i);
  return it == first.begin() ? 0 : static_cast<std::size_t>(it - first.begin()) - 1;
}

Result<ShardPlan> plan_shards(std::vector<TensorSpec> tensors, std::uint64_t max_shard_bytes,
                              const std::map<std::string, std::string>& metadata,
                              std::string_view prefix) {
  std::vector<TensorView> views = views_of(tensors);
  QR_ASSIGN_OR_RETURN(plan, plan_shards_view(views, max_shard_bytes, metadata, prefix));
  plan.owned = std::move(tensors);  // the buffers move: every view stays valid
  plan.owned_views = std::move(views);
  plan.specs = plan.owned_views;
  return plan;
}

Result<ShardPlan> plan_shards_view(std::span<const TensorView> tensors,
                                   std::uint64_t max_shard_bytes,
                                   const std::map<std::string, std::string>& metadata,
                                   std::string_view prefix) {
  if (max_shard_bytes == 0) {
    return Error(ErrorKind::kInvalidArgument, "maximum shard size must be positive");
  }
  if (tensors.size() > std::numeric_limits<std::uint32_t>::max()) {  // NameIndex positions
    return Error(ErrorKind::kLimitExceeded, fmt::format("{} tensors, over 2^32", tensors.size()));
  }
  ShardPlan plan;
  plan.specs = tensors;
  std::uint64_t current = 0;
  for (std::size_t i = 0; i < plan.specs.size(); ++i) {
    const TensorView& t = plan.specs[i];
    const auto numel = checked_numel(t.shape);
    const auto size = numel ? dtype_byte_size(t.dtype, *numel) : std::nullopt;
    if (!size) {
      return Error(ErrorKind::kSizeOverflow, "size overflows or is not whole bytes")
          .in_tensor(t.name);
    }
    if (plan.first.empty() || (current > 0 && current + *size > max_shard_bytes)) {
      plan.first.push_back(i);
      current = 0;
    }
    current += *size;
    plan.total_size += *size;
  }
  if (plan.first.empty()) plan.first.push_back(0);  // an empty checkpoint is one empty file
  const std::size_t n = plan.first.size();
  for (std::size_t s = 0; s < n; ++s) {
    plan.file_names.push_back(prefix.empty() ? shard_file_name(s, n)
                                             : fmt::format("{}{:05d}.safetensors", prefix, s));
    const std::size_t end = s + 1 < n ? plan.first[s + 1] : plan.specs.size();
    const std::span<const TensorView> run(plan.specs.data() + plan.first[s], end - plan.first[s]);
    QR_ASSIGN_OR_RETURN(layout, plan_safetensors_view(run, metadata));
    plan.layouts.push_back(std::move(layout));
  }
  return plan;
}

Result<std::unique_ptr<AtomicFileSink>> prepare_index_file(
    const std::string& dir, std::uint64_t total_size,
    std::vector<std::pair<std::string_view, std::string_view>> names) {
  // Streamed: the index names every tensor. weight_map is sorted by name, as a JSON object
  // DOM would order it.
  std::sort(names.begin(), names.end());
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create((fs::path(dir) / kIndexFileName).string()));
  JsonObjectStream js(*sink, 2);
  QR_TRY(js.member("metadata", nlohmann::json{{"total_size", total_size}}));
  QR_TRY(js.begin_object("weight_map"));
  for (const auto& [name, file] : names) {
    QR_TRY(js.item(std::string(name), nlohmann::json(std::string(file))));
  }
  QR_TRY(js.finish());
  QR_TRY(sink->prepare());
  return sink;
}

Status set_shard_metadata(ShardPlan& plan, std::size_t s,
                          const std::map<std::string, std::string>& metadata) {
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors_view(plan.layouts[s].tensors, metadata));
  // a layout planned alone keeps its specs (the buffers move: the views stay valid)
  layout.owned = std::move(plan.layouts[s].owned);
  layout.owned_views = std::move(plan.layouts[s].owned_views);
  plan.layouts[s] = std::move(layout);
  return ok_status();
}

CheckpointWriter::CheckpointWriter(std::string dir, ShardPlan plan)
    : dir_(std::move(dir)), plan_(std::move(plan)) {}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::create(const std::string& dir,
                                                                   ShardPlan plan) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      return Error(ErrorKind::kOutputExists, "output exists and is not a directory").in_file(dir);
    }
    QR_ASSIGN_OR_RETURN(names, list_directory(dir));
    for (const std::string& name : names) {
      if (name == kIndexFileName ||
          (name.size() > 12 && name.ends_with(".safetensors") && name[0] != '.')) {
        return Error(ErrorKind::kOutputExists,
                     fmt::format("output directory already holds {}; remove it or choose another "
                                 "directory",
                                 name))
            .in_file(dir)
            .with_rule("output.fresh_dir");
      }
    }
  } else if (!fs::create_directories(dir, ec)) {
    return Error(ErrorKind::kIoOpen, "cannot create directory: " + ec.message()).in_file(dir);
  }
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(dir, std::move(plan)));
}

Status CheckpointWriter::open_shard(std::size_t i) {
  const std::string path = (fs::path(dir_) / plan_.file_names[i]).string();
  shard_ = i;
  in_shard_ = 0;
  opened_ = i + 1;
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->reserve(plan_.layouts[i].file_size()));
  sinks_.push_back(std::move(sink));
  current_file_ = sinks_.back().get();
  writer_ = std::make_unique<SafetensorsWriter>(plan_.layouts[i], *current_file_);
  return ok_status();
}

Status CheckpointWriter::close_current() {
  // The sink is only prepared (fsync'd), not renamed: nothing becomes visible before every
  // shard is durable.
  if (!writer_) return ok_status();
  const SafetensorsLayout& layout = plan_.layouts[shard_];
  if (in_shard_ != layout.tensors.size()) {
    return Error(ErrorKind::kIoWrite,
                 fmt::format("shard has {} of {} tensors", in_shard_, layout.tensors.size()))
        .in_file(plan_.file_names[shard_]);
  }
  QR_TRY(writer_->finish_data());
  QR_TRY(current_file_->prepare());
  writer_.reset();
  return ok_status();
}

Status CheckpointWriter::begin_tensor(std::string_view name) {
  if (!writer_) QR_TRY(open_shard(0));
  while (in_shard_ == plan_.layouts[shard_].tensors.size()) {
    if (shard_ + 1 >= plan_.layouts.size()) {
      return Error(ErrorKind::kIoWrite, "tensor is not in the plan or was already written")
          .in_tensor(name);
    }
    QR_TRY(close_current());
    QR_TRY(open_shard(shard_ + 1));
  }
  QR_TRY(writer_->begin_tensor(name));
  ++in_shard_;
  return ok_status();
}

Status CheckpointWriter::append(std::span<const std::uint8_t> bytes) {
  if (!writer_) return Error(ErrorKind::kIoWrite, "append before begin_tensor");
  return writer_->append(bytes);
}

Status CheckpointWriter::write_tensor(std::string_view name, std::span<const std::uint8_t> bytes) {
  QR_TRY(begin_tensor(name));
  return append(bytes);
}

Status CheckpointWriter::finish_shards() {
  if (!writer_ && opened_ == 0) QR_TRY(open_shard(0));
  // Close the current shard, then any remaining ones (which must be empty to pass).
  QR_TRY(close_current());
  while (opened_ < plan_.layouts.size()) {
    QR_TRY(open_shard(opened_));
    QR_TRY(close_current());
  }
  return ok_status();
}

Status CheckpointWriter::finish() {
  QR_TRY(finish_shards());
  std::unique_ptr<AtomicFileSink> index;
  if (plan_.layouts.size() > 1) {
    std::vector<std::pair<std::string_view, std::string_view>> names;
    for (std::size_t s = 0; s < plan_.layouts.size(); ++s) {
      for (const TensorView& t : plan_.layouts[s].tensors) {
        names.emplace_back(t.name, plan_.file_names[s]);
      }
    }
    QR_ASSIGN_OR_RETURN(sink, prepare_index_file(dir_, plan_.total_size, std::move(names)));
    index = std::move(sink);
  }
  for (auto& file : staged_) {
    QR_TRY(file->publish());
    written_.push_back(file->name());
  }
  for (auto& sink : sinks_) {
    QR_TRY(sink->publish());
    written_.push_back(sink->name());
  }
  if (index) {
    QR_TRY(index->publish());
    written_.push_back(index->name());
  }
  return ok_status();
}

}  // namespace qrepack
