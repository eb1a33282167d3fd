#include "qrepack/io/safetensors_writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/check.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/name_index.h"
#include "qrepack/io/safetensors.h"

namespace qrepack {
namespace {

std::string json_quoted(std::string_view s) { return nlohmann::json(s).dump(); }

}  // namespace

Result<SafetensorsLayout> plan_safetensors(std::vector<TensorSpec> tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<TensorView> views = views_of(tensors);
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors_view(views, metadata));
  layout.owned = std::move(tensors);  // the buffers move: every view stays valid
  layout.owned_views = std::move(views);
  layout.tensors = layout.owned_views;
  return layout;
}

std::uint64_t data_bytes(const TensorView& t) {
  return dtype_byte_size(t.dtype, checked_numel(t.shape).value_or(0)).value_or(0);
}

std::vector<TensorView> views_of(std::span<const TensorSpec> specs) {
  std::vector<TensorView> out;
  out.reserve(specs.size());
  for (const TensorSpec& t : specs) out.push_back(t.view());
  return out;
}

namespace {

// A name that occurs twice (sorting indices: 4 bytes per tensor, no copy of the names).
std::optional<std::string_view> repeated_name(std::span<const TensorView> tensors) {
  const auto name_of = [tensors](std::size_t i) { return tensors[i].name; };
  const auto repeat = NameIndex::build(tensors.size(), name_of).first_repeat(name_of);
  if (!repeat) return std::nullopt;
  return tensors[repeat->second].name;
}

// Checks each tensor and records the data size in `layout`.
Status place_tensors(std::span<const TensorView> tensors, SafetensorsLayout& layout) {
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (t.name == "__metadata__") {
      return Error(ErrorKind::kReservedName, "\"__metadata__\" cannot name a tensor")
          .in_tensor(t.name)
          .with_rule("safetensors.reserved_name");
    }
    const auto numel = checked_numel(t.shape);
    const auto bits = numel ? checked_mul(*numel, dtype_info(t.dtype).bits) : std::nullopt;
    if (!bits) {
      return Error(ErrorKind::kSizeOverflow, "shape overflows 64 bits")
          .in_tensor(t.name)
          .with_rule("safetensors.size_overflow");
    }
    if (*bits % 8 != 0) {
      return Error(ErrorKind::kMisalignedSize, "size is not a whole number of bytes")
          .in_tensor(t.name)
          .with_rule("safetensors.whole_bytes");
    }
    const auto end = checked_add(offset, *bits / 8);
    if (!end) {
      return Error(ErrorKind::kSizeOverflow, "file size overflows 64 bits").in_tensor(t.name);
    }
    offset = *end;
  }
  layout.data_size = offset;
  return ok_status();
}

// Emits the JSON header text through `put(std::string_view)`: once to count, once to write.
template <class Put>
void emit_header_json(std::span<const TensorView> tensors,
                      const std::map<std::string, std::string>& metadata,
                      std::span<const std::pair<std::string, std::string>> metadata_last,
                      Put&& put) {
  put("{");
  bool first = true;
  if (!metadata.empty()) {
    put("\"__metadata__\":{");
    bool first_meta = true;
    for (const auto& [k, v] : metadata) {
      put(fmt::format("{}{}:{}", first_meta ? "" : ",", json_quoted(k), json_quoted(v)));
      first_meta = false;
    }
    put("}");
    first = false;
  }
  std::uint64_t offset = 0;  // place_tensors checked that the sum fits
  for (const TensorView& t : tensors) {
    const std::uint64_t end = offset + data_bytes(t);
    put(fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                    first ? "" : ",", json_quoted(t.name), dtype_info(t.dtype).safetensors,
                    fmt::join(t.shape, ","), offset, end));
    offset = end;
    first = false;
  }
  if (!metadata_last.empty()) {
    put(first ? "\"__metadata__\":{" : ",\"__metadata__\":{");
    bool first_meta = true;
    for (const auto& [k, v] : metadata_last) {
      put(fmt::format("{}{}:{}", first_meta ? "" : ",", json_quoted(k), json_quoted(v)));
      first_meta = false;
    }
    put("}");
  }
  put("}");
}

}  // namespace

Result<SafetensorsLayout> plan_safetensors_view(
    std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata) {
  if (tensors.size() > std::numeric_limits<std::uint32_t>::max()) {  // NameIndex positions
    return Error(ErrorKind::kLimitExceeded, fmt::format("{} tensors, over 2^32", tensors.size()));
  }
  if (const auto name = repeated_name(tensors)) {
    return Error(ErrorKind::kDuplicateTensor, "tensor appears twice in the plan")
        .in_tensor(std::string(*name))
        .with_rule("safetensors.unique_names");
  }
  SafetensorsLayout layout;
  QR_TRY(place_tensors(tensors, layout));
  std::uint64_t n = 0;
  emit_header_json(tensors, metadata, {}, [&n](std::string_view s) { n += s.size(); });
  n = (n + 7) / 8 * 8;  // padded with spaces
  if (n > kMaxSafetensorsHeader) {
    return Error(ErrorKind::kHeaderTooLarge,
                 fmt::format("header of {} bytes exceeds the {} byte limit", n,
                             kMaxSafetensorsHeader))
        .with_rule("safetensors.header_limit");
  }
  layout.header_size = 8 + n;
  layout.metadata = metadata;
  layout.tensors = tensors;
  return layout;
}

Result<SafetensorsLayout> plan_safetensors_metadata_last(
    std::vector<TensorSpec> tensors, std::vector<std::pair<std::string, std::string>> metadata,
    std::uint64_t data_align) {
  QR_CHECK(data_align >= 8 && (data_align & (data_align - 1)) == 0,
           "plan_safetensors_metadata_last: alignment");
  QR_ASSIGN_OR_RETURN(layout, plan_safetensors(std::move(tensors), {}));
  // The header again with the trailing metadata counted, padded so that 8 + header is a
  // multiple of the alignment.
  std::uint64_t n = 0;
  emit_header_json(layout.tensors, {}, metadata, [&n](std::string_view s) { n += s.size(); });
  n = (8 + n + data_align - 1) / data_align * data_align - 8;
  if (n > kMaxSafetensorsHeader) {
    return Error(ErrorKind::kHeaderTooLarge,
                 fmt::format("header of {} bytes exceeds the {} byte limit", n,
                             kMaxSafetensorsHeader))
        .with_rule("safetensors.header_limit");
  }
  layout.header_size = 8 + n;
  layout.metadata_last = std::move(metadata);
  return layout;
}

namespace {

// Sends the header of `layout` through `put`: the length, the JSON, the padding.
template <class Put>
void emit_header(const SafetensorsLayout& layout, Put&& put) {
  const std::uint64_t n = layout.header_size - 8;
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(n >> (8 * i));
  put(std::string_view(prefix, 8));
  std::uint64_t json = 0;
  emit_header_json(layout.tensors, layout.metadata, layout.metadata_last, [&](std::string_view s) {
    json += s.size();
    put(s);
  });
  put(std::string(n - json, ' '));
}

}  // namespace

std::vector<std::uint8_t> safetensors_header_bytes(const SafetensorsLayout& layout) {
  std::vector<std::uint8_t> out;
  out.reserve(layout.header_size);
  emit_header(layout, [&out](std::string_view s) { out.insert(out.end(), s.begin(), s.end()); });
  return out;
}

void sort_for_alignment(std::vector<TensorSpec>& tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return dtype_info(a.dtype).bits > dtype_info(b.dtype).bits;
  });
}

Status SafetensorsWriter::write_header_once() {
  if (header_written_) return ok_status();
  header_written_ = true;
  Status status = ok_status();
  emit_header(layout_, [&](std::string_view s) {
    if (status.ok()) {
      status = sink_.write(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
    }
  });
  return status;
}

Status SafetensorsWriter::begin_tensor(std::string_view name) {
  QR_TRY(write_header_once());
  if (remaining_ != 0) {
    return Error(ErrorKind::kIoWrite, fmt::format("previous tensor '{}' is {} bytes short",
                                                  layout_.tensors[next_ - 1].name, remaining_))
        .in_file(sink_.name())
        .in_tensor(name);
  }
  if (next_ >= layout_.tensors.size() || layout_.tensors[next_].name != name) {
    return Error(ErrorKind::kIoWrite,
                 next_ >= layout_.tensors.size()
                     ? std::string("tensor is not in the layout or was already written")
                     : fmt::format("out of order: expected '{}' next", layout_.tensors[next_].name))
        .in_file(sink_.name())
        .in_tensor(name);
  }
  remaining_ = data_bytes(layout_.tensors[next_]);
  ++next_;
  return ok_status();
}

Status SafetensorsWriter::append(std::span<const std::uint8_t> bytes) {
  if (next_ == 0 || bytes.size() > remaining_) {
    return Error(ErrorKind::kIoWrite, next_ == 0 ? std::string("append before begin_tensor")
                                                 : fmt::format("{} bytes more than the tensor's "
                                                               "remaining {}",
                                                               bytes.size(), remaining_))
        .in_file(sink_.name())
        .in_tensor(next_ == 0 ? "" : layout_.tensors[next_ - 1].name);
  }
  remaining_ -= bytes.size();
  return sink_.write(bytes);
}

Status SafetensorsWriter::write_tensor(std::string_view name, std::span<const std::uint8_t> bytes) {
  QR_TRY(begin_tensor(name));
  return append(bytes);
}

Status SafetensorsWriter::finish() {
  QR_TRY(finish_data());
  return sink_.commit();
}

Status SafetensorsWriter::finish_data() {
  QR_TRY(write_header_once());
  if (remaining_ != 0 || next_ != layout_.tensors.size()) {
    return Error(ErrorKind::kIoWrite,
                 fmt::format("incomplete: {} of {} tensors written", next_ - (remaining_ ? 1 : 0),
                             layout_.tensors.size()))
        .in_file(sink_.name());
  }
  return ok_status();
}

}  // namespace qrepack
