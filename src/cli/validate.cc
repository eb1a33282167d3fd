// `qrepack validate PACK`: checks a dit_svdquant_v1 pack on the CPU; writes nothing.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/format.h"
#include "qrepack/omega/pack_validate.h"

namespace qrepack::cli {
namespace {

struct ValidateCli {
  std::string pack, select;
  std::optional<std::int64_t> expected;
};

Status run_validate(const ValidateCli& c) {
  QR_ASSIGN_OR_RETURN(o, pack_validate_options(c.select, c.expected));
  QR_ASSIGN_OR_RETURN(f, TorchFile::open(c.pack));
  QR_ASSIGN_OR_RETURN(v, validate_omega_pack(f, o));
  fmt::print("validated {}/{} records\n", v.records.size(), v.expected);
  return ok_status();
}

}  // namespace

Result<PackValidateOptions> pack_validate_options(const std::string& select,
                                                  std::optional<std::int64_t> expected_records) {
  PackValidateOptions o;
  if (!select.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(select, "--select"));
    o.select = std::move(re);
  }
  // Given means given: 0 is refused, as FlashRT's converter refuses it ("must be positive"),
  // not read as "not given".
  if (expected_records) {
    if (*expected_records <= 0) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--expected-records must be positive, got {}", *expected_records));
    }
    o.expected_records = static_cast<std::uint64_t>(*expected_records);
  }
  return o;
}

Action add_validate(CLI::App& sub) {
  auto c = std::make_shared<ValidateCli>();
  sub.add_option("PACK", c->pack, "An Omega dit_svdquant_v1 pack (torch .pt)")->required();
  sub.add_option("--select", c->select, "Only validate records whose name matches this regex");
  sub.add_option("--expected-records", c->expected, "Record count to require (default 252)");
  return [c] { return run_validate(*c); };
}

}  // namespace qrepack::cli
