// GGUF: checking a parsed header before any tensor byte is read, the value helpers, and the
// open file (include/qrepack/io/gguf.h).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "io/gguf_internal.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/ggml_quants.h"

namespace qrepack {
namespace gguf_detail {
namespace {

Error tensor_error(ErrorKind k, const GgufTensor& t, std::string msg, std::string_view rule) {
  Error e(k, std::move(msg));
  e.in_tensor(t.name).with_rule(rule);
  return e;
}

Status check_alignment(GgufHeader& h) {
  std::vector<std::string_view> keys;
  for (const GgufKv& kv : h.metadata) keys.push_back(kv.key);
  std::sort(keys.begin(), keys.end());
  const auto dup = std::adjacent_find(keys.begin(), keys.end());
  if (dup != keys.end()) {
    return Error(ErrorKind::kDuplicateKey, fmt::format("metadata key \"{}\" appears twice", *dup))
        .with_rule("gguf.duplicate_key");
  }
  const GgufValue* a = h.find("general.alignment");
  if (!a) return ok_status();
  if (a->type != GgufType::kU32 || a->u == 0 || (a->u & (a->u - 1)) != 0 ||
      a->u > kMaxGgufAlignment) {
    return Error(ErrorKind::kInvalidMetadata,
                 fmt::format("general.alignment must be a u32 power of two up to {} (is {} {})",
                             kMaxGgufAlignment, gguf_type_name(a->type),
                             a->is_integer() ? std::to_string(a->u) : std::string("-")))
        .with_rule("gguf.alignment");
  }
  h.alignment = a->u;
  return ok_status();
}

// Type, shape and byte size of one tensor.
Status size_tensor(GgufTensor& t) {
  const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
  const bool newer = t.ggml_type >= kFirstNewerGgmlType && t.ggml_type <= kMaxGgmlType;
  if (!info && !newer) {
    return tensor_error(ErrorKind::kUnknownDtype, t,
                        fmt::format("ggml type {} is not one ggml defines", t.ggml_type),
                        "gguf.tensor_type");
  }
  const auto numel = checked_numel(t.dims);
  if (!numel || *numel == 0 || std::find(t.dims.begin(), t.dims.end(), 0u) != t.dims.end()) {
    return tensor_error(
        ErrorKind::kInvalidShape, t,
        fmt::format("dims [{}] are empty or overflow 64 bits", fmt::join(t.dims, ", ")),
        "gguf.shape");
  }
  if (!info) {  // a type added to ggml after qrepack's table: its size is unknown
    t.numel = *numel;
    t.bytes = 0;
    t.sized = false;
    return ok_status();
  }
  if (t.dims[0] % info->block != 0) {
    return tensor_error(ErrorKind::kInvalidShape, t,
                        fmt::format("{} rows of {} elements are not whole blocks of {}", info->name,
                                    t.dims[0], info->block),
                        "gguf.block");
  }
  const auto bytes = checked_mul(*numel / info->block, info->block_bytes);
  if (!bytes) {
    return tensor_error(ErrorKind::kSizeOverflow, t, "byte size overflows 64 bits", "gguf.shape");
  }
  t.numel = *numel;
  t.bytes = *bytes;
  return ok_status();
}

Status place_tensor(GgufTensor& t, const GgufHeader& h) {
  if (t.offset % h.alignment != 0) {
    return tensor_error(
        ErrorKind::kInvalidOffsets, t,
        fmt::format("offset {} is not a multiple of the alignment {}", t.offset, h.alignment),
        "gguf.offset_alignment");
  }
  const auto begin = checked_add(h.data_start, t.offset);
  const auto end = begin ? checked_add(*begin, t.bytes) : std::nullopt;
  // A tensor of a newer type (bytes unknown) must at least start inside the file.
  if (!end || *end > h.file_size || (!t.sized && *end >= h.file_size)) {
    return tensor_error(ErrorKind::kTruncatedData, t,
                        fmt::format("bytes [{}, +{}) of the data section run past the end of "
                                    "the {}-byte file",
                                    t.offset, t.bytes, h.file_size),
                        "gguf.tensor_span");
  }
  t.file_offset = *begin;
  return ok_status();
}

Status check_names_and_overlaps(const GgufHeader& h) {
  std::vector<std::size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return h.tensors[a].name < h.tensors[b].name; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& t = h.tensors[order[i]];
    if (t.name == h.tensors[order[i - 1]].name) {
      return tensor_error(ErrorKind::kDuplicateTensor, t, "tensor name appears twice",
                          "gguf.duplicate_tensor");
    }
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return h.tensors[a].offset < h.tensors[b].offset;
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& prev = h.tensors[order[i - 1]];
    const GgufTensor& t = h.tensors[order[i]];
    if (t.offset < prev.offset + prev.bytes) {
      return tensor_error(ErrorKind::kOffsetOverlap, t,
                          fmt::format("bytes at offset {} overlap tensor \"{}\" [{}, {})", t.offset,
                                      prev.name, prev.offset, prev.offset + prev.bytes),
                          "gguf.overlap");
    }
  }
  return ok_status();
}

}  // namespace

Status validate(GgufHeader& h, std::uint64_t infos_end) {
  QR_TRY(check_alignment(h));
  const auto start = checked_add(infos_end, h.alignment - 1);
  h.data_start = *start / h.alignment * h.alignment;  // infos_end <= file size: no overflow
  if (!h.tensors.empty() && h.data_start > h.file_size) {
    return Error(ErrorKind::kTruncatedData,
                 fmt::format("the data section would start at byte {}, past the end of the "
                             "{}-byte file",
                             h.data_start, h.file_size))
        .with_rule("gguf.data_start");
  }
  for (GgufTensor& t : h.tensors) {
    QR_TRY(size_tensor(t));
    QR_TRY(place_tensor(t, h));
  }
  return check_names_and_overlaps(h);
}

}  // namespace gguf_detail

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto i = static_cast<std::size_t>(t);
  return i < std::size(kNames) ? kNames[i] : "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_signed() const {
  return type == GgufType::kI8 || type == GgufType::kI16 || type == GgufType::kI32 ||
         type == GgufType::kI64;
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  for (const GgufKv& kv : metadata) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensor* GgufHeader::tensor(std::string_view name) const {
  for (const GgufTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<GgufFile> GgufFile::from_source(std::shared_ptr<const ByteSource> source) {
  QR_ASSIGN_OR_RETURN(h, parse_gguf(*source));
  std::vector<std::shared_ptr<const ByteSource>> sources{std::move(source)};
  return GgufFile(std::move(sources), std::move(h));
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  // A set of one part is an ordinary file (its split.* keys, if any, are just metadata).
  const auto split = gguf_split_name(std::filesystem::path(path).filename().string());
  if (split && split->count > 1) return open_gguf_split(path);
  QR_ASSIGN_OR_RETURN(src, open_byte_source(path));
  return from_source(std::move(src));
}

std::vector<std::string> GgufFile::paths() const {
  std::vector<std::string> out;
  for (const auto& s : sources_) out.push_back(s->name());
  return out;
}

Status GgufFile::read(const GgufTensor& t, std::uint64_t offset,
                      std::span<std::uint8_t> out) const {
  if (offset > t.bytes || out.size() > t.bytes - offset || t.part >= sources_.size()) {
    return Error(ErrorKind::kInternal, "read past the tensor's bytes").in_tensor(t.name);
  }
  return sources_[t.part]->read_at(t.file_offset + offset, out);
}

namespace {

std::vector<std::string> files_with(const std::string& dir, std::string_view ext) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ext) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Whether every one of `files` is a part of one split set (same prefix and count; opening it
// then names a part that is missing).
bool one_split_set(const std::vector<std::string>& files) {
  std::optional<GgufSplitName> first;
  for (const std::string& f : files) {
    const auto n = gguf_split_name(std::filesystem::path(f).filename().string());
    if (!n || n->count < 2) return false;
    if (!first) first = n;
    if (n->prefix != first->prefix || n->count != first->count) return false;
  }
  return first.has_value();
}

}  // namespace

bool is_gguf_source(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return !files_with(path, ".gguf").empty() && files_with(path, ".safetensors").empty();
  }
  return std::filesystem::path(path).extension() == ".gguf";
}

Result<std::string> resolve_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return path;
  const std::vector<std::string> files = files_with(path, ".gguf");
  if (files.size() > 1 && one_split_set(files)) return files[0];
  if (files.size() != 1) {
    return Error(ErrorKind::kInvalidArgument,
                 fmt::format("holds {} .gguf files; a GGUF source is one file or one split "
                             "set PREFIX-NNNNN-of-MMMMM.gguf (pass it by name){}",
                             files.size(),
                             files.empty() ? "" : ": " + fmt::format("{}", fmt::join(files, ", "))))
        .in_file(path)
        .with_rule("gguf.one_file");
  }
  return files[0];
}

}  // namespace qrepack
