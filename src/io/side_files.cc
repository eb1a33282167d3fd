#include "qrepack/io/side_files.h"

#include <array>
#include <filesystem>

#include "qrepack/io/byte_sink.h"
#include "qrepack/io/byte_source.h"

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

}  // namespace

std::span<const std::string_view> side_file_names() { return kSideFiles; }

Result<std::vector<std::unique_ptr<AtomicFileSink>>> stage_side_files(const std::string& src_dir,
                                                                      const std::string& out_dir) {
  std::vector<std::unique_ptr<AtomicFileSink>> staged;
  std::vector<std::uint8_t> buf(std::size_t{1} << 20);
  for (std::string_view name : kSideFiles) {
    const fs::path src = fs::path(src_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    QR_ASSIGN_OR_RETURN(in, FileSource::open(src.string()));
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
