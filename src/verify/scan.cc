// scan_source: decodes every weight of a checkpoint as convert would read it, row block by row
// block, so a file with a bad scale or a non-finite value is found before a run depends on it
// (the families the engine runs as downloaded have no conversion to find it).
#include <algorithm>

#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/verify/verify.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kScanFloats = std::uint64_t{1} << 20;

}  // namespace

Result<ScanReport> scan_source(const std::string& source) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(source));
  // A model_type qrepack converts nothing for (a family run as downloaded) is scanned without a
  // config: the encodings are recognised from names, dtypes and shapes alone.
  auto cfg = load_moe_config(ck.directory());
  const MoeConfig* c = cfg.ok() && *cfg ? &**cfg : nullptr;
  QR_ASSIGN_OR_RETURN(rec, recognize_weights(ck, c));
  ScanReport rep;
  rep.encodings = rec.encoding_counts;
  WeightReader reader(ck, rec.block_rows, rec.block_cols);
  std::vector<float> rows;
  for (const LogicalWeight& w : rec.weights) {
    QR_TRY(reader.open(w));
    const std::uint64_t cols = std::max<std::uint64_t>(reader.cols(), 1);
    const std::uint64_t step = std::max<std::uint64_t>(1, kScanFloats / cols);
    for (std::uint64_t r = 0; r < reader.rows(); r += step) {
      const std::uint64_t n = std::min(step, reader.rows() - r);
      rows.resize(n * cols);
      QR_TRY(reader.read_rows(r, n, rows));
      rep.values += n * cols;
    }
    ++rep.weights;
  }
  return rep;
}

}  // namespace qrepack
