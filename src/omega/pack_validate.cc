#include "qrepack/omega/pack_validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "core/problems.h"
#include "core/tensor_name.h"
#include "qrepack/io/torch_values.h"

namespace qrepack {
namespace {

const PtTensor* tensor_field(const PtValue& rec, const char* f) {
  const PtValue* v = rec.get(f);
  return v && v->is_tensor() ? &std::get<PtTensor>(v->v) : nullptr;
}

std::optional<std::int64_t> int_field(const PtValue& rec, const char* f) {
  const PtValue* v = rec.get(f);
  if (!v || !v->is_int()) return std::nullopt;
  return std::get<std::int64_t>(v->v);
}

std::string shape_str(const std::vector<std::uint64_t>& s) {
  return fmt::format("({})", fmt::join(s, ", "));
}

Status check_record(const TorchFile& f, const std::string& name, const PtValue& rec, Problems& p) {
  auto bad = [&](const char* field, std::string why) {
    p.add(ErrorKind::kInvalidRecord, fmt::format("record '{}' field '{}': {}", name, field, why));
  };
  if (!rec.is_dict()) {
    p.add(ErrorKind::kInvalidRecord, fmt::format("record '{}' is not a dict", name));
    return ok_status();
  }
  const PtValue* fmt_v = rec.get("format");
  if (!fmt_v || !fmt_v->is_string() || std::get<std::string>(fmt_v->v) != "dit_svdquant_v1") {
    bad("format", "must be \"dit_svdquant_v1\"");
  }
  // An integer field given as a float or bool (0.0, False, 4.0) is refused by name: FlashRT's
  // converter takes it because 0.0 == 0 in Python, but the artifact would then carry a float.
  auto int_rule = [&](const char* field, std::int64_t want, const char* why) {
    const PtValue* v = rec.get(field);
    if (v && (std::holds_alternative<double>(v->v) || std::holds_alternative<bool>(v->v))) {
      const std::string got = std::holds_alternative<bool>(v->v)
                                  ? (std::get<bool>(v->v) ? "True" : "False")
                                  : fmt::format("{}", std::get<double>(v->v));
      bad(field,
          fmt::format("must be the integer {}, got {} {} (FlashRT's converter accepts it "
                      "because Python compares it equal; qrepack keeps integer fields "
                      "integers)",
                      want, std::holds_alternative<bool>(v->v) ? "the bool" : "the float", got));
    } else if (int_field(rec, field) != want) {
      bad(field, why);
    }
  };
  int_rule("rank", 0, "must be 0 (rank > 0 SVDQuant is not supported)");
  int_rule("weight_bits", 4, "must be 4");
  int_rule("a_bits", 4, "must be 4");
  const PtTensor* w = tensor_field(rec, "weight_res_q");
  if (!w || !is_float_dtype(w->dtype) || w->shape.size() != 2) {
    bad("weight_res_q", "must be a 2-D floating-point tensor");
    return ok_status();
  }
  const std::uint64_t n = w->shape[0], k = w->shape[1];
  if (n == 0 || k == 0 || n % 64 || k % 64) {
    bad("weight_res_q",
        fmt::format("shape {} must be positive multiples of 64", shape_str(w->shape)));
    return ok_status();
  }
  QR_ASSIGN_OR_RETURN(finite_w, all_finite_values(f, *w));
  if (!finite_w) bad("weight_res_q", "holds NaN or Inf");
  if (int_field(rec, "out_features") != static_cast<std::int64_t>(n))
    bad("out_features", fmt::format("must equal N = {}", n));
  if (int_field(rec, "in_features") != static_cast<std::int64_t>(k))
    bad("in_features", fmt::format("must equal K = {}", k));
  const PtTensor* la = tensor_field(rec, "lowrank_A");
  if (!la || la->shape != std::vector<std::uint64_t>{n, 0})
    bad("lowrank_A", fmt::format("must have shape ({}, 0)", n));
  const PtTensor* lb = tensor_field(rec, "lowrank_B");
  if (!lb || lb->shape != std::vector<std::uint64_t>{k, 0})
    bad("lowrank_B", fmt::format("must have shape ({}, 0)", k));
  const PtTensor* tab = tensor_field(rec, "act_scale_table");
  if (!tab || !is_float_dtype(tab->dtype) || tab->shape.size() != 2 || tab->shape[0] < 1 ||
      tab->shape[1] != k) {
    bad("act_scale_table", fmt::format("must be a floating [T >= 1, {}] tensor", k));
  } else {
    QR_ASSIGN_OR_RETURN(
        pos, all_float_values(f, *tab, [](double v) { return std::isfinite(v) && v > 0; }));
    if (!pos) bad("act_scale_table", "every entry must be finite and > 0");
  }
  struct Blocks {
    const char* field;
    std::uint64_t count;
  };
  for (const Blocks& b :
       {Blocks{"duquant_rotation_blocks", k / 64}, Blocks{"duquant_rotation_out_blocks", n / 64}}) {
    const PtTensor* t = tensor_field(rec, b.field);
    if (!t || t->shape != std::vector<std::uint64_t>{b.count, 64, 64} ||
        !is_float_dtype(t->dtype)) {
      bad(b.field, fmt::format("must be a floating ({}, 64, 64) tensor", b.count));
      continue;
    }
    QR_ASSIGN_OR_RETURN(fin, all_finite_values(f, *t));
    if (!fin) bad(b.field, "holds NaN or Inf");
  }
  const PtTensor* perm = tensor_field(rec, "duquant_rotation_perm");
  if (!perm || perm->dtype != Dtype::kI64 || perm->shape != std::vector<std::uint64_t>{k}) {
    bad("duquant_rotation_perm", fmt::format("must be an int64 ({},) tensor", k));
  } else {
    QR_ASSIGN_OR_RETURN(v, read_i64(f, *perm));
    std::vector<bool> seen(k, false);
    for (std::int64_t x : v) {
      if (x < 0 || static_cast<std::uint64_t>(x) >= k || seen[static_cast<std::size_t>(x)]) {
        bad("duquant_rotation_perm", fmt::format("is not a permutation of 0..{}", k - 1));
        break;
      }
      seen[static_cast<std::size_t>(x)] = true;
    }
  }
  return ok_status();
}

}  // namespace

Status validate_omega_record(const TorchFile& f, const std::string& name) {
  const PtValue* rec = f.root().is_dict() ? f.root().get(name) : nullptr;
  if (!rec || name == "__meta__") {
    return Error(ErrorKind::kRecordCount, fmt::format("the pack has no record '{}'", name))
        .in_file(f.path())
        .with_rule("omega.record");
  }
  Problems problems;
  QR_TRY(check_record(f, name, *rec, problems));
  if (!problems.empty()) return std::move(problems.to_error(20).in_file(f.path()));
  return ok_status();
}

Result<PackValidation> validate_omega_pack(const TorchFile& f, const PackValidateOptions& o) {
  const PtValue& root = f.root();
  if (!root.is_dict()) {
    return Error(ErrorKind::kInvalidRecord, "the pack is not a dict")
        .in_file(f.path())
        .with_rule("omega.pack");
  }
  const PtValue* meta = root.get("__meta__");
  if (meta && !meta->is_dict()) {
    return Error(ErrorKind::kInvalidRecord, "__meta__ is not a dict")
        .in_file(f.path())
        .with_rule("omega.pack");
  }
  PackValidation out;
  std::vector<std::pair<std::string, const PtValue*>> recs;
  for (const auto& [k, v] : std::get<PtDict>(root.v)) {
    if (!k->is_string()) {
      return Error(ErrorKind::kInvalidRecord, "a pack key is not a string").in_file(f.path());
    }
    const std::string& name = std::get<std::string>(k->v);
    if (Status named = check_tensor_name(name, ErrorKind::kInvalidRecord); !named.ok()) {
      return std::move(named.error().in_file(f.path()));
    }
    if (name == "__meta__") continue;
    if (o.select && !o.select->search(name)) continue;
    recs.emplace_back(name, v.get());
  }
  std::sort(recs.begin(), recs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (recs.empty()) {
    return Error(ErrorKind::kRecordCount, "no records matched")
        .in_file(f.path())
        .with_rule("omega.coverage");
  }
  bool fixture = false;
  if (meta) {
    const PtValue* recipe = meta->get("recipe");
    fixture = recipe && recipe->is_string() &&
              std::get<std::string>(recipe->v).rfind("synthetic fixture", 0) == 0;
  }
  out.expected = o.expected_records      ? *o.expected_records
                 : (o.select || fixture) ? recs.size()
                                         : kPi05RecordCount;
  Problems problems;
  if (recs.size() != out.expected) {
    problems.add(ErrorKind::kRecordCount,
                 fmt::format("{} records selected, {} expected (pi0.5 packs hold {}; pass "
                             "--expected-records N for another model)",
                             recs.size(), out.expected, kPi05RecordCount));
  }
  for (const auto& [name, v] : recs) {
    QR_TRY(check_record(f, name, *v, problems));
    out.records.push_back(name);
  }
  if (!problems.empty()) return std::move(problems.to_error(20).in_file(f.path()));
  return out;
}

}  // namespace qrepack
