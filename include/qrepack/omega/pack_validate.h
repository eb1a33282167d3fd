// Validation of Omega-QVLA `dit_svdquant_v1` rank-0 packs (reference/flashrt_omega.md §1.3,
// §3.3): every selected record is checked before any conversion and every problem is reported,
// each naming its record and field. Coverage: an unfiltered pack holds exactly 252 records
// (pi0.5), unless --expected-records says otherwise; a pack whose __meta__.recipe starts with
// "synthetic fixture", or a --select run, must have every selected record valid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/core/name_pattern.h"
#include "qrepack/io/torch_pt.h"

namespace qrepack {

inline constexpr std::uint64_t kPi05RecordCount = 252;

struct PackValidateOptions {
  std::optional<NamePattern> select;
  std::optional<std::uint64_t> expected_records;
};

struct PackValidation {
  std::vector<std::string> records;  ///< selected names, sorted as the reference converter sorts
  std::uint64_t expected = 0;
};

/// Checks one record by name (every rule above, all problems reported); a missing record is a
/// kRecordCount error.
Status validate_omega_record(const TorchFile& pack, const std::string& name);

Result<PackValidation> validate_omega_pack(const TorchFile& pack, const PackValidateOptions& o);

}  // namespace qrepack
