// Split GGUFs (llama.cpp's gguf-split): PREFIX-00001-of-0000N.gguf ... PREFIX-0000N-of-0000N.gguf,
// each a whole GGUF holding some of the tensors; the first also holds the model's metadata, and
// every part split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32, all
// parts' tensors). Opened as one checkpoint: each part parsed and validated alone, then checked
// against its name and the others (rule gguf.split) before any tensor byte is read.
#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "qrepack/io/gguf.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// Parts one set may have: each holds a file descriptor's worth of state while open.
constexpr std::uint32_t kMaxSplitParts = 1024;

std::optional<std::uint32_t> five_digits(std::string_view s) {
  if (s.size() != 5 || s.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  std::uint32_t v = 0;
  for (char c : s) v = v * 10 + static_cast<std::uint32_t>(c - '0');
  return v;
}

Error split_error(const std::string& path, std::string message) {
  return Error(ErrorKind::kInvalidMetadata, std::move(message))
      .in_file(path)
      .with_rule("gguf.split");
}

// Key `key` of part `h` as an integer, or an error naming the file.
Result<std::uint64_t> split_key(const GgufHeader& h, const char* key, const std::string& path) {
  const GgufValue* v = h.find(key);
  if (!v || !v->is_integer()) {
    return split_error(path, fmt::format("a split GGUF part needs an integer {}", key));
  }
  if (v->is_signed() && v->as_i64() < 0) {
    return split_error(path, fmt::format("{} is negative", key));
  }
  return v->u;
}

// Checks part i (0-based) of `count` against its name and appends its tensors to `merged`.
Status merge_part(GgufHeader h, std::uint32_t i, std::uint32_t count, const std::string& path,
                  std::set<std::string>& names, GgufHeader& merged) {
  QR_ASSIGN_OR_RETURN(no, split_key(h, "split.no", path));
  QR_ASSIGN_OR_RETURN(n, split_key(h, "split.count", path));
  if (no != i || n != count) {
    return split_error(path, fmt::format("split.no {} and split.count {} disagree with the file "
                                         "name (part {} of {})",
                                         no, n, i + 1, count));
  }
  for (GgufTensor& t : h.tensors) {
    if (!names.insert(t.name).second) {
      return split_error(path, fmt::format("tensor {} is also in an earlier part", t.name));
    }
    t.part = i;
    merged.tensors.push_back(std::move(t));
  }
  merged.file_size += h.file_size;
  if (i == 0) {
    merged.version = h.version;
    merged.alignment = h.alignment;
    merged.data_start = h.data_start;
    merged.metadata = std::move(h.metadata);
  }
  return ok_status();
}

}  // namespace

std::optional<GgufSplitName> gguf_split_name(std::string_view name) {
  constexpr std::string_view kExt = ".gguf", kOf = "-of-";
  // PREFIX-NNNNN-of-MMMMM.gguf: "-NNNNN-of-MMMMM" (15 characters) before the extension.
  constexpr std::size_t kTail = 1 + 5 + 4 + 5;
  if (!name.ends_with(kExt) || name.size() < 1 + kTail + kExt.size()) return std::nullopt;
  const std::string_view core = name.substr(0, name.size() - kExt.size());
  const std::string_view tail = core.substr(core.size() - kTail);  // -NNNNN-of-MMMMM
  if (tail[0] != '-' || tail.substr(6, 4) != kOf) return std::nullopt;
  const auto part = five_digits(tail.substr(1, 5)), count = five_digits(tail.substr(10, 5));
  if (!part || !count || *part == 0 || *part > *count) return std::nullopt;
  return GgufSplitName{std::string(core.substr(0, core.size() - kTail)), *part, *count};
}

Result<GgufFile> open_gguf_split(const std::string& path) {
  const fs::path p(path);
  const auto s = gguf_split_name(p.filename().string());
  if (!s) return split_error(path, "not a split GGUF name (PREFIX-NNNNN-of-MMMMM.gguf)");
  if (s->count > kMaxSplitParts) {
    return split_error(
        path, fmt::format("{} parts (qrepack opens at most {})", s->count, kMaxSplitParts));
  }
  std::vector<std::shared_ptr<const ByteSource>> sources;
  GgufHeader merged;
  merged.file_size = 0;
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < s->count; ++i) {
    const std::string part =
        (p.parent_path() / fmt::format("{}-{:05d}-of-{:05d}.gguf", s->prefix, i + 1, s->count))
            .string();
    std::error_code ec;
    if (!fs::is_regular_file(part, ec)) {
      return split_error(part, fmt::format("part {} of {} is missing", i + 1, s->count));
    }
    QR_ASSIGN_OR_RETURN(src, open_byte_source(part));
    QR_ASSIGN_OR_RETURN(h, parse_gguf(*src));
    QR_TRY(merge_part(std::move(h), i, s->count, part, names, merged));
    sources.push_back(std::move(src));
  }
  QR_ASSIGN_OR_RETURN(total, split_key(merged, "split.tensors.count", sources.front()->name()));
  if (total != merged.tensors.size()) {
    return split_error(sources.front()->name(),
                       fmt::format("split.tensors.count is {}, the parts hold {} tensors", total,
                                   merged.tensors.size()));
  }
  return GgufFile(std::move(sources), std::move(merged));
}

}  // namespace qrepack
