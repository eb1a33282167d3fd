#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include "core/tensor_name.h"
#include "io/json_strict.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/safetensors.h"

namespace qrepack {
namespace {

using json = nlohmann::json;

Error tensor_error(ErrorKind kind, std::string_view tensor, std::string message,
                   std::string_view rule) {
  Error e(kind, std::move(message));
  e.in_tensor(tensor).with_rule(rule);
  return e;
}

std::string dtype_hint(const std::string& s) {
  std::string upper = s;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (dtype_from_safetensors(upper)) return fmt::format("; did you mean \"{}\"?", upper);
  return {};
}

std::string known_dtypes() {
  std::vector<std::string_view> names;
  for (const auto& row : all_dtypes()) names.push_back(row.safetensors);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Checks one "name": {dtype, shape, data_offsets} entry.
Result<TensorEntry> parse_entry(const std::string& name, const json& v, Arena& arena) {
  if (!v.is_object()) {
    return tensor_error(ErrorKind::kInvalidTensorEntry, name, "entry is not a JSON object",
                        "safetensors.entry");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) {
      return tensor_error(ErrorKind::kInvalidTensorEntry, name,
                          fmt::format("entry has no \"{}\"", field), "safetensors.entry");
    }
  }
  TensorEntry t;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) {
    return tensor_error(ErrorKind::kInvalidTensorEntry, name, "\"dtype\" is not a string",
                        "safetensors.entry");
  }
  const auto parsed = dtype_from_safetensors(dtype.get<std::string>());
  if (!parsed) {
    const std::string s = dtype.get<std::string>();
    return tensor_error(
        ErrorKind::kUnknownDtype, name,
        fmt::format("unknown dtype \"{}\"{} (known: {})", s, dtype_hint(s), known_dtypes()),
        "safetensors.dtype");
  }
  t.dtype = *parsed;
  const json& shape = v["shape"];
  if (!shape.is_array()) {
    return tensor_error(ErrorKind::kInvalidShape, name, "\"shape\" is not an array",
                        "safetensors.shape");
  }
  std::vector<std::uint64_t> dims;
  dims.reserve(shape.size());
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) {
      return tensor_error(ErrorKind::kInvalidShape, name,
                          fmt::format("shape entry {} is not a non-negative integer", d.dump()),
                          "safetensors.shape");
    }
    dims.push_back(d.get<std::uint64_t>());
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return tensor_error(ErrorKind::kInvalidOffsets, name,
                        fmt::format("\"data_offsets\" must be [begin, end] with non-negative "
                                    "integers, got {}",
                                    off.dump()),
                        "safetensors.offsets");
  }
  t.begin = off[0].get<std::uint64_t>();
  const std::uint64_t end = off[1].get<std::uint64_t>();
  if (end < t.begin) {
    return tensor_error(ErrorKind::kInvalidOffsets, name,
                        fmt::format("data_offsets end {} is before begin {}", end, t.begin),
                        "safetensors.offsets");
  }
  const auto numel = checked_numel(dims);
  const auto bits = numel ? checked_mul(*numel, dtype_info(t.dtype).bits) : std::nullopt;
  if (!bits) {
    return tensor_error(ErrorKind::kSizeOverflow, name,
                        fmt::format("shape [{}] overflows 64 bits", fmt::join(dims, ", ")),
                        "safetensors.size_overflow");
  }
  if (*bits % 8 != 0) {
    return tensor_error(ErrorKind::kMisalignedSize, name,
                        fmt::format("{} elements of {} are not a whole number of bytes", *numel,
                                    dtype_info(t.dtype).safetensors),
                        "safetensors.whole_bytes");
  }
  if (end - t.begin != *bits / 8) {
    return tensor_error(
        ErrorKind::kTensorSizeMismatch, name,
        fmt::format("data_offsets span {} bytes but {} [{}] needs {}", end - t.begin,
                    dtype_info(t.dtype).safetensors, fmt::join(dims, ", "), *bits / 8),
        "safetensors.size");
  }
  t.name = arena.copy(name);
  t.shape = arena.copy(dims);
  return t;
}

// The "__metadata__" object: string values only, bounded in total size.
Status parse_metadata(const json& value, SafetensorsHeader& h) {
  if (!value.is_object()) {
    return Error(ErrorKind::kInvalidMetadata, "__metadata__ is not an object")
        .with_rule("safetensors.metadata");
  }
  std::uint64_t metadata_bytes = 0;
  for (const auto& [mk, mv] : value.items()) {
    if (!mv.is_string()) {
      return Error(ErrorKind::kInvalidMetadata,
                   fmt::format("__metadata__[\"{}\"] is {}, not a string", mk, mv.dump()))
          .with_rule("safetensors.metadata");
    }
    metadata_bytes += mk.size() + mv.get_ref<const std::string&>().size();
    if (metadata_bytes > kMaxSafetensorsMetadataBytes) {
      return Error(ErrorKind::kLimitExceeded, fmt::format("__metadata__ holds more than {} bytes",
                                                          kMaxSafetensorsMetadataBytes))
          .with_rule("safetensors.max_metadata_bytes");
    }
    h.metadata.emplace(mk, mv.get<std::string>());
  }
  return ok_status();
}

}  // namespace

std::uint64_t TensorEntry::numel() const { return checked_numel(shape).value_or(0); }

std::uint64_t TensorEntry::byte_size() const { return dtype_byte_size(dtype, numel()).value_or(0); }

static_assert(sizeof(TensorEntry) <= 48);

Result<std::uint64_t> parse_safetensors_prefix(std::span<const std::uint8_t> prefix,
                                               std::uint64_t file_size) {
  if (prefix.size() >= 4 && std::memcmp(prefix.data(), "PK\x03\x04", 4) == 0) {
    return Error(ErrorKind::kNotSafetensors,
                 "starts with a zip signature: this is a torch .pt / zip file, not safetensors")
        .with_rule("safetensors.magic");
  }
  if (file_size < 8 || prefix.size() < 8) {
    return Error(ErrorKind::kHeaderTooSmall,
                 fmt::format("file is {} bytes, shorter than the 8-byte header length", file_size))
        .with_rule("safetensors.prefix");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<std::size_t>(i)];
  if (n > kMaxSafetensorsHeader) {
    return Error(
               ErrorKind::kHeaderTooLarge,
               fmt::format("header length {} exceeds the {} byte limit", n, kMaxSafetensorsHeader))
        .with_rule("safetensors.header_limit")
        .at_offset(0);
  }
  if (8 + n > file_size) {
    return Error(ErrorKind::kHeaderLengthBeyondFile,
                 fmt::format("header length {} runs past the end of a {}-byte file", n, file_size))
        .with_rule("safetensors.header_in_file")
        .at_offset(0);
  }
  return n;
}

namespace {

std::size_t count_occurrences(std::string_view text, std::string_view word) {
  std::size_t n = 0;
  for (std::size_t at = text.find(word); at != std::string_view::npos;
       at = text.find(word, at + word.size())) {
    ++n;
  }
  return n;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::uint8_t> header,
                                                   std::uint64_t file_size) {
  if (const auto bad = first_invalid_utf8(header)) {
    return Error(ErrorKind::kHeaderNotUtf8, "header is not valid UTF-8")
        .with_rule("safetensors.utf8")
        .at_offset(8 + *bad);
  }
  const std::string_view text(reinterpret_cast<const char*>(header.data()), header.size());
  SafetensorsHeader h;
  h.header_length = header.size();
  h.file_size = file_size;
  // The entries live as long as the checkpoint: reserved once for the "data_offsets" keys the
  // text holds (each entry has one; a name holding the word only reserves more, bounded by
  // the header's size and the tensor cap) instead of growing by doubling.
  h.tensors.reserve(std::min(count_occurrences(text, "\"data_offsets\""), kMaxSafetensorsTensors));
  bool seen_metadata = false;
  // Each member is checked as it is parsed: the header's DOM is never built whole.
  const JsonMemberFn on_member = [&](const std::string& key, json&& value) -> Status {
    if (key.size() > kMaxTensorNameBytes) {
      return Error(ErrorKind::kLimitExceeded, fmt::format("a name of {} bytes, over the cap of {}",
                                                          key.size(), kMaxTensorNameBytes))
          .with_rule("safetensors.max_name_bytes");
    }
    QR_TRY(check_tensor_name(key, ErrorKind::kInvalidTensorEntry));
    if (key == "__metadata__") {
      if (seen_metadata) {
        return Error(ErrorKind::kDuplicateKey, "duplicate key \"__metadata__\"")
            .with_rule("json.unique_keys");
      }
      seen_metadata = true;
      return parse_metadata(value, h);
    }
    if (h.tensors.size() >= kMaxSafetensorsTensors) {
      return Error(
                 ErrorKind::kLimitExceeded,
                 fmt::format("more than {} tensors, over the cap per file", kMaxSafetensorsTensors))
          .with_rule("safetensors.max_tensors");
    }
    QR_ASSIGN_OR_RETURN(entry, parse_entry(key, value, *h.arena));
    h.tensors.push_back(std::move(entry));
    return ok_status();
  };
  const Status parsed =
      parse_json_strict_members(text, ErrorKind::kHeaderNotJson,
                                Error(ErrorKind::kHeaderNotObject, "header is not a JSON object")
                                    .with_rule("safetensors.object"),
                                on_member);
  if (!parsed.ok()) {
    Error e = parsed.error();
    if (e.offset()) {
      Error shifted(e.kind(), e.message());
      shifted.with_rule(e.rule()).at_offset(8 + *e.offset());
      return shifted;
    }
    return e;
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end() < b.end();
  });
  std::uint64_t running = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : h.tensors) {
    if (t.begin < running) {
      return tensor_error(ErrorKind::kOffsetOverlap, t.name,
                          fmt::format("data [{}, {}) overlaps '{}' which ends at {}", t.begin,
                                      t.end(), previous->name, running),
                          "safetensors.no_overlap");
    }
    if (t.begin > running) {
      return tensor_error(ErrorKind::kOffsetGap, t.name,
                          fmt::format("data starts at {} but the previous tensor ends at {}: "
                                      "{} unclaimed bytes",
                                      t.begin, running, t.begin - running),
                          "safetensors.no_gap");
    }
    running = t.end();
    previous = &t;
  }
  const std::uint64_t expected = 8 + h.header_length + running;
  if (expected < file_size) {
    return Error(ErrorKind::kTrailingBytes,
                 fmt::format("{} bytes after the last tensor (file {} bytes, tensors end at {})",
                             file_size - expected, file_size, expected))
        .with_rule("safetensors.no_trailing")
        .at_offset(expected);
  }
  if (expected > file_size) {
    return Error(ErrorKind::kTruncatedData,
                 fmt::format("file is truncated: tensors need {} bytes, file has {}", expected,
                             file_size))
        .with_rule("safetensors.complete")
        .at_offset(file_size);
  }
  // At most kMaxSafetensorsTensors: fits 32 bits.
  // The root's keys are the tensor names: a repeat is refused as any repeated JSON key is.
  // (The index is not kept: a checkpoint indexes the names of all its shards at once.)
  const auto name_of = [&h](std::size_t i) { return h.tensors[i].name; };
  if (const auto repeat = NameIndex::build(h.tensors.size(), name_of).first_repeat(name_of)) {
    return Error(ErrorKind::kDuplicateKey,
                 fmt::format("duplicate key \"{}\"", h.tensors[repeat->second].name))
        .with_rule("json.unique_keys");
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  QR_ASSIGN_OR_RETURN(source, open_byte_source(path));
  return from_source(std::move(source));
}

Result<SafetensorsFile> SafetensorsFile::from_source(std::shared_ptr<const ByteSource> source) {
  const std::uint64_t size = source->size();
  std::array<std::uint8_t, 8> prefix{};
  const std::size_t prefix_len = static_cast<std::size_t>(std::min<std::uint64_t>(8, size));
  auto status = source->read_at(0, std::span(prefix.data(), prefix_len));
  if (!status.ok()) return std::move(status).error();
  auto n = parse_safetensors_prefix(std::span(prefix.data(), prefix_len), size);
  if (!n.ok()) return std::move(n.error().in_file(source->name()));
  std::vector<std::uint8_t> header(static_cast<std::size_t>(*n));
  status = source->read_at(8, header);
  if (!status.ok()) return std::move(status).error();
  auto parsed = parse_safetensors_header(header, size);
  if (!parsed.ok()) return std::move(parsed.error().in_file(source->name()));
  return SafetensorsFile(std::move(source), std::move(parsed).value());
}

Status SafetensorsFile::read(const TensorEntry& tensor, std::uint64_t offset,
                             std::span<std::uint8_t> out) const {
  const auto end = checked_add(offset, out.size());
  if (!end || *end > tensor.byte_size()) {
    return Error(ErrorKind::kIoRead,
                 fmt::format("read of [{}, {}) is outside the tensor's {} bytes", offset,
                             offset + out.size(), tensor.byte_size()))
        .in_file(path())
        .in_tensor(tensor.name);
  }
  auto status = source_->read_at(header_.data_start() + tensor.begin + offset, out);
  if (!status.ok()) return std::move(status.error().in_tensor(tensor.name));
  return status;
}

}  // namespace qrepack
