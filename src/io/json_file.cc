#include "io/json_file.h"

#include <cstdint>
#include <span>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack {

Result<nlohmann::json> read_json_file(const std::string& path, ErrorKind syntax_kind,
                                      std::uint64_t max_bytes) {
  QR_ASSIGN_OR_RETURN(text, read_small_file(path, max_bytes));
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
