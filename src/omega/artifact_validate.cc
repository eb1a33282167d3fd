// validate_e0m3_artifact: the omega_e0m3_v1 artifact's structure against its pack.
#include <fmt/format.h>

#include <set>

#include "core/problems.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/omega/e0m3_check.h"

namespace qrepack {
namespace {

const std::string* str_of(const PtValue* v) {
  return v && v->is_string() ? &std::get<std::string>(v->v) : nullptr;
}
std::optional<std::int64_t> int_of(const PtValue* v) {
  if (!v || !v->is_int()) return std::nullopt;
  return std::get<std::int64_t>(v->v);
}
const PtTensor* tensor_of(const PtValue* v) {
  return v && v->is_tensor() ? &std::get<PtTensor>(v->v) : nullptr;
}

std::set<std::string> dict_keys(const PtValue& d) {
  std::set<std::string> keys;
  for (const auto& [k, v] : std::get<PtDict>(d.v)) {
    if (k->is_string()) keys.insert(std::get<std::string>(k->v));
  }
  return keys;
}

std::string first_of(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::vector<std::string> only;
  for (const auto& x : a) {
    if (!b.count(x)) only.push_back(x);
  }
  std::string s;
  for (std::size_t i = 0; i < only.size() && i < 3; ++i) s += (i ? ", " : "") + only[i];
  if (only.size() > 3) s += fmt::format(" and {} more", only.size() - 3);
  return s;
}

void check_layer(const std::string& name, const PtValue& w, const PtValue* aux,
                 const std::string& fold, const TorchFile& pack, Problems& p) {
  auto bad = [&](std::string why) {
    p.add(ErrorKind::kInvalidRecord, fmt::format("weights['{}']: {}", name, why));
  };
  const PtValue* rec = pack.root().get(name);
  const PtTensor* src = rec && rec->is_dict() ? tensor_of(rec->get("weight_res_q")) : nullptr;
  if (!src || src->shape.size() != 2) {
    bad("the pack has no record of that name with a 2-D weight_res_q");
    return;
  }
  const std::uint64_t n = src->shape[0], k = src->shape[1];
  if (!w.is_dict()) {
    bad("is not a dict");
    return;
  }
  if (int_of(w.get("N")) != static_cast<std::int64_t>(n) ||
      int_of(w.get("K")) != static_cast<std::int64_t>(k)) {
    bad(fmt::format("N and K must be the pack's {} and {}", n, k));
  }
  const PtTensor* packed = tensor_of(w.get("packed"));
  if (!packed || packed->dtype != Dtype::kU8 ||
      packed->shape != std::vector<std::uint64_t>{n, k / 2}) {
    bad(fmt::format("packed must be uint8 ({}, {})", n, k / 2));
  }
  const PtTensor* sfb = tensor_of(w.get("sfb"));
  if (!sfb || sfb->dtype != Dtype::kU8 || sfb->shape.size() != 1 ||
      sfb->numel() != sf_sm1xx_size(n, k)) {
    bad(fmt::format("sfb must be uint8 with {} elements", sf_sm1xx_size(n, k)));
  }
  const std::string* af = aux && aux->is_dict() ? str_of(aux->get("fold")) : nullptr;
  if (!af || *af != fold) {
    p.add(ErrorKind::kInvalidRecord,
          fmt::format("aux['{}'].fold must equal the artifact's fold \"{}\"", name, fold));
  }
  if (fold == "actnorm" && aux && aux->is_dict()) {  // the runtime's x / static, alpha = out
    const PtTensor* st = tensor_of(aux->get("act_scale_static"));
    if (!st || st->dtype != Dtype::kF32 || st->shape != std::vector<std::uint64_t>{k}) {
      p.add(ErrorKind::kInvalidRecord,
            fmt::format("aux['{}'].act_scale_static must be float32 ({},)", name, k));
    }
    const PtValue* out = aux->get("act_out_scale");
    const PtTensor* ot = tensor_of(out);
    const bool scalar = out && (std::holds_alternative<double>(out->v) ||
                                (ot && ot->dtype == Dtype::kF32 && ot->shape.empty()));
    if (!scalar) {
      p.add(ErrorKind::kInvalidRecord,
            fmt::format("aux['{}'].act_out_scale must be a float or a 0-d float32 tensor", name));
    }
  }
}

}  // namespace

Status validate_e0m3_artifact(const TorchFile& art, const TorchFile& pack) {
  const auto fail = [&](std::string why) {
    return Error(ErrorKind::kInvalidRecord, std::move(why))
        .in_file(art.path())
        .with_rule("omega.artifact");
  };
  const PtValue& root = art.root();
  if (!root.is_dict()) return fail("the artifact is not a dict");
  const std::string* format = str_of(root.get("format"));
  if (!format || *format != "omega_e0m3_v1") return fail("format must be \"omega_e0m3_v1\"");
  if (int_of(root.get("schema_version")) != 1) return fail("schema_version must be 1");
  const PtValue* weights = root.get("weights");
  const PtValue* aux = root.get("aux");
  const PtValue* layers = root.get("selected_layers");
  if (!weights || !weights->is_dict()) return fail("weights must be a dict");
  if (!aux || !aux->is_dict()) return fail("aux must be a dict");
  if (!layers || !std::holds_alternative<PtList>(layers->v)) {
    return fail("selected_layers must be a list");
  }
  const std::string* fold = str_of(root.get("fold"));
  if (!fold || (*fold != "none" && *fold != "mean" && *fold != "actnorm")) {
    return fail("fold must be \"none\", \"mean\" or \"actnorm\"");
  }
  Problems p;
  std::set<std::string> selected;
  const auto& list = std::get<PtList>(layers->v);
  for (const auto& v : list) {
    if (const std::string* s = str_of(v.get())) {
      selected.insert(*s);
    } else {
      p.add(ErrorKind::kInvalidRecord, "selected_layers holds a non-string");
    }
  }
  if (int_of(root.get("selected_record_count")) != static_cast<std::int64_t>(list.size())) {
    p.add(ErrorKind::kInvalidRecord,
          fmt::format("selected_record_count must equal len(selected_layers) = {}", list.size()));
  }
  const std::set<std::string> wk = dict_keys(*weights), ak = dict_keys(*aux);
  if (selected != wk || wk != ak) {
    std::string detail;
    using Side =
        std::tuple<const char*, const std::set<std::string>*, const std::set<std::string>*>;
    for (const auto& [label, a, b] :
         {Side{"in selected_layers only", &selected, &wk}, Side{"in weights only", &wk, &selected},
          Side{"in weights not aux", &wk, &ak}, Side{"in aux not weights", &ak, &wk}}) {
      const std::string s = first_of(*a, *b);
      if (!s.empty()) detail += fmt::format("{}{}: {}", detail.empty() ? "" : "; ", label, s);
    }
    p.add(ErrorKind::kInvalidRecord,
          fmt::format("coverage mismatch: selected_layers, weights and aux must name the same "
                      "layers ({})",
                      detail));
  }
  for (const auto& [k, v] : std::get<PtDict>(weights->v)) {
    if (!k->is_string()) continue;
    const std::string& name = std::get<std::string>(k->v);
    check_layer(name, *v, aux->get(name), *fold, pack, p);
  }
  if (!p.empty()) return std::move(p.to_error(20).in_file(art.path()).with_rule("omega.artifact"));
  return ok_status();
}

}  // namespace qrepack
