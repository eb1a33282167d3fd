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
                 const std::string& fold, const E0m3Source& source, Problems& p) {
  auto bad = [&](std::string why) {
    p.add(ErrorKind::kInvalidRecord, fmt::format("weights['{}']: {}", name, why));
  };
  const auto shape = source.shape_of(name);
  if (!shape) {
    bad(fmt::format("the {} has no {} of that name", source.kind, source.what));
    return;
  }
  const auto [n, k] = *shape;
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

namespace {

E0m3Source pack_source(const TorchFile& pack) {
  return {
      "pack", "record with a 2-D weight_res_q",
      [&pack](const std::string& name) -> std::optional<std::pair<std::uint64_t, std::uint64_t>> {
        const PtValue* rec = pack.root().is_dict() ? pack.root().get(name) : nullptr;
        const PtTensor* w = rec && rec->is_dict() ? tensor_of(rec->get("weight_res_q")) : nullptr;
        if (!w || w->shape.size() != 2) return std::nullopt;
        return std::pair{w->shape[0], w->shape[1]};
      }};
}

}  // namespace

std::vector<std::string> e0m3_artifact_missing_metadata(const TorchFile& art) {
  std::vector<std::string> missing;
  for (const char* key : {"schema_version", "selected_layers", "selected_record_count"}) {
    if (!art.root().is_dict() || !art.root().get(key)) missing.push_back(key);
  }
  return missing;
}

Status validate_e0m3_artifact(const TorchFile& art, const TorchFile& pack) {
  return validate_e0m3_artifact(art, pack_source(pack));
}

Status validate_e0m3_artifact(const TorchFile& art, const E0m3Source& source) {
  const auto fail = [&](std::string why) {
    return Error(ErrorKind::kInvalidRecord, std::move(why))
        .in_file(art.path())
        .with_rule("omega.artifact");
  };
  const PtValue& root = art.root();
  if (!root.is_dict()) return fail("the artifact is not a dict");
  const std::string* format = str_of(root.get("format"));
  if (!format || *format != "omega_e0m3_v1") return fail("format must be \"omega_e0m3_v1\"");
  // schema_version, selected_layers and selected_record_count are checked when present: FlashRT's
  // PR #179 converter and its fork's QAT converter write none of them.
  if (root.get("schema_version") && int_of(root.get("schema_version")) != 1) {
    return fail("schema_version must be 1");
  }
  const PtValue* weights = root.get("weights");
  const PtValue* aux = root.get("aux");
  const PtValue* layers = root.get("selected_layers");
  if (!weights || !weights->is_dict()) return fail("weights must be a dict");
  if (!aux || !aux->is_dict()) return fail("aux must be a dict");
  if (layers && !std::holds_alternative<PtList>(layers->v)) {
    return fail("selected_layers must be a list");
  }
  const std::string* fold = str_of(root.get("fold"));
  if (!fold || (*fold != "none" && *fold != "mean" && *fold != "actnorm")) {
    return fail("fold must be \"none\", \"mean\" or \"actnorm\"");
  }
  Problems p;
  const std::set<std::string> wk = dict_keys(*weights), ak = dict_keys(*aux);
  std::set<std::string> selected = wk;  // without selected_layers: the weights' own names
  std::size_t listed = wk.size();
  if (layers) {
    selected.clear();
    const auto& list = std::get<PtList>(layers->v);
    listed = list.size();
    for (const auto& v : list) {
      if (const std::string* s = str_of(v.get())) {
        selected.insert(*s);
      } else {
        p.add(ErrorKind::kInvalidRecord, "selected_layers holds a non-string");
      }
    }
  }
  const PtValue* count = root.get("selected_record_count");
  if (count && int_of(count) != static_cast<std::int64_t>(listed)) {
    p.add(
        ErrorKind::kInvalidRecord,
        fmt::format("selected_record_count must equal the number of selected layers = {}", listed));
  }
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
    check_layer(name, *v, aux->get(name), *fold, source, p);
  }
  if (!p.empty()) return std::move(p.to_error(20).in_file(art.path()).with_rule("omega.artifact"));
  return ok_status();
}

Result<const PtValue*> e0m3_artifact_layer(const TorchFile& artifact, const std::string& layer) {
  const PtValue* w = artifact.root().get("weights")->get(layer);
  if (!w) {
    return Error(ErrorKind::kRecordCount,
                 fmt::format("layer '{}' is not in the artifact (pass --layer NAME)", layer))
        .in_file(artifact.path())
        .with_rule("omega.artifact");
  }
  return w;
}

}  // namespace qrepack
