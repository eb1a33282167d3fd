#include "qrepack/verify/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "io/json_strict.h"
#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/exec/weight_reader.h"
#include "qrepack/plan/rules.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {
namespace {

constexpr std::uint64_t kBlockFloats = std::uint64_t{2} << 20;

}  // namespace

void ErrorStats::add(const ErrorStats& o) {
  n += o.n;
  ref2 += o.ref2;
  err2 += o.err2;
  out2 += o.out2;
  dot += o.dot;
  max_abs = std::max(max_abs, o.max_abs);
}
double ErrorStats::rel_l2() const {
  if (ref2 == 0) return err2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(err2 / ref2);
}
double ErrorStats::cosine() const {
  if (ref2 == 0 || out2 == 0) return ref2 == out2 ? 1.0 : 0.0;
  return dot / std::sqrt(ref2 * out2);
}
double ErrorStats::snr_db() const {
  if (err2 == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(ref2 / err2);
}

Result<VerifyReport> verify_conversion(const std::string& source, const std::string& output) {
  QR_ASSIGN_OR_RETURN(src, Checkpoint::open(source));
  QR_ASSIGN_OR_RETURN(out, Checkpoint::open(output));
  QR_ASSIGN_OR_RETURN(src_cfg, load_moe_config(src.directory()));
  QR_ASSIGN_OR_RETURN(src_rec, recognize_weights(src, src_cfg ? &*src_cfg : nullptr));
  QR_ASSIGN_OR_RETURN(out_rec, recognize_weights(out, nullptr));
  std::unordered_map<std::string_view, const LogicalWeight*> out_weights;
  for (const LogicalWeight& w : out_rec.weights) out_weights.emplace(w.name, &w);

  QR_ASSIGN_OR_RETURN(stamps, read_format_stamps(out));
  WeightReader sreader(src, src_rec.block_rows, src_rec.block_cols);
  WeightReader oreader(out, out_rec.block_rows, out_rec.block_cols);
  const RuleContext ctx{family_rules(nullptr), ~0ull};
  VerifyReport rep;
  std::vector<float> a, b;
  for (const LogicalWeight& w : src_rec.weights) {
    const auto t = out.find(w.name);
    if (!t) {
      ++rep.not_in_output;
      continue;
    }
    QR_TRY(sreader.open(w));
    const std::uint64_t rows = sreader.rows(), cols = sreader.cols();
    const auto m = classify_weight(w.name, ctx);
    TensorVerify tv{std::string(w.name), m ? weight_class_name(m->rule->cls) : "other", "", {}};
    const auto qs = out.find(std::string(w.name) + ".qs");
    std::optional<ContainerFormat> cf;
    if (qs) {
      auto r = resolve_container_format(rows, cols, t->entry->byte_size(), qs->entry->byte_size(),
                                        find_stamp(stamps, w.name));
      if (!r.ok()) {
        return Error(ErrorKind::kVerificationFailed,
                     fmt::format("the engine would not load it: {}", r.error().message()))
            .in_file(output)
            .in_tensor(w.name)
            .with_rule(std::string(r.error().rule()));
      }
      cf = *r;
      tv.format = cf->name();
    } else {
      const auto ow = out_weights.find(w.name);
      if (ow == out_weights.end()) {
        return Error(ErrorKind::kVerificationFailed, "output tensor is not a float or FP8 weight")
            .in_file(output)
            .in_tensor(w.name);
      }
      QR_TRY(oreader.open(*ow->second));
      if (oreader.rows() != rows || oreader.cols() != cols) {
        return Error(ErrorKind::kVerificationFailed, "output shape differs from the source")
            .in_file(output)
            .in_tensor(w.name);
      }
      tv.format = ow->second->encoding == SourceEncoding::kFp8Block
                      ? "fp8-block"
                      : std::string(dtype_info(ow->second->source_dtype).name);
    }
    const std::uint64_t step =
        std::max<std::uint64_t>(1, kBlockFloats / std::max<std::uint64_t>(cols, 1));
    for (std::uint64_t r = 0; r < rows; r += step) {
      const std::uint64_t n = std::min(step, rows - r);
      a.resize(n * cols);
      b.resize(n * cols);
      QR_TRY(sreader.read_rows(r, n, a));
      if (cf) {
        QR_TRY(read_container_rows(out, *t, *qs, *cf, cols, r, n, b));
      } else {
        QR_TRY(oreader.read_rows(r, n, b));
      }
      for (std::size_t k = 0; k < a.size(); ++k) {
        const double x = a[k], y = b[k], d = y - x;
        tv.stats.ref2 += x * x;
        tv.stats.out2 += y * y;
        tv.stats.err2 += d * d;
        tv.stats.dot += x * y;
        tv.stats.max_abs = std::max(tv.stats.max_abs, std::fabs(d));
      }
      tv.stats.n += a.size();
    }
    rep.tensors.push_back(std::move(tv));
  }
  return rep;
}

}  // namespace qrepack
