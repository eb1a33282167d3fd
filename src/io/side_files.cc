#include "qrepack/io/side_files.h"

#include <array>
#include <filesystem>

#include "io/fs_util.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/byte_source.h"
#include "remote/paths.h"

namespace qrepack {
namespace fs = std::filesystem;
namespace {

constexpr std::array<std::string_view, 10> kSideFiles = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
};

// Tokenizers run to tens of MB; nothing a checkpoint ships beside its shards is near this.
constexpr std::uint64_t kMaxSideFileBytes = 1ull << 30;

}  // namespace

std::span<const std::string_view> side_file_names() { return kSideFiles; }

Result<std::shared_ptr<const ByteSource>> open_side_file(const std::string& path) {
  if (!remote::is_remote_path(path)) return open_byte_source(path);
  QR_ASSIGN_OR_RETURN(text, read_small_file(path, kMaxSideFileBytes));
  return std::shared_ptr<const ByteSource>(
      std::make_shared<MemorySource>(path, std::vector<std::uint8_t>(text.begin(), text.end())));
}

Result<std::vector<std::unique_ptr<AtomicFileSink>>> stage_side_files(const std::string& src_dir,
                                                                      const std::string& out_dir) {
  std::vector<std::unique_ptr<AtomicFileSink>> staged;
  std::vector<std::uint8_t> buf(std::size_t{1} << 20);
  for (std::string_view name : kSideFiles) {
    const fs::path src = fs::path(src_dir) / name;
    if (path_kind(src.string()) != PathKind::kRegular) continue;
    QR_ASSIGN_OR_RETURN(in, open_side_file(src.string()));
    QR_ASSIGN_OR_RETURN(out, AtomicFileSink::create((fs::path(out_dir) / name).string()));
    for (std::uint64_t off = 0; off < in->size(); off += buf.size()) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), in->size() - off));
      QR_TRY(in->read_at(off, std::span(buf.data(), n)));
      QR_TRY(out->write(std::span(buf.data(), n)));
    }
    QR_TRY(out->prepare());
    staged.push_back(std::move(out));
  }
  return staged;
}

}  // namespace qrepack
