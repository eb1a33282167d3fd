#include "io/json_file.h"

#include <fmt/format.h>

#include <cstdint>
#include <span>

#include "io/json_strict.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/byte_source.h"

namespace qrepack {

Result<nlohmann::json> read_json_file(const std::string& path, ErrorKind syntax_kind,
                                      std::uint64_t max_bytes) {
  QR_ASSIGN_OR_RETURN(src, FileSource::open(path));
  if (src->size() > max_bytes) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("{} bytes, over the cap of {}", src->size(), max_bytes))
        .in_file(path)
        .with_rule("json_file.max_bytes");
  }
  std::string text(src->size(), '\0');
  QR_TRY(src->read_at(0, std::span(reinterpret_cast<std::uint8_t*>(text.data()), text.size())));
  auto parsed = parse_json_strict(text, syntax_kind);
  if (!parsed.ok()) return std::move(parsed.error().in_file(path));
  return std::move(*parsed);
}

Status write_json_file(const std::string& path, const nlohmann::ordered_json& j) {
  const std::string text = j.dump(1) + "\n";
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())));
  return sink->commit();
}

}  // namespace qrepack
