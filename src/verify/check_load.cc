#include "qrepack/verify/check_load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {

namespace {

// One weight the engine loads: present, and in a layout the engine's loader accepts.
void check_weight(const Checkpoint& ck, const ModelWeight& w, CheckLoadReport& rep) {
  ++rep.checked;
  const auto t = ck.find(w.name);
  if (!t) {
    rep.missing.push_back(w.name);
    return;
  }
  const auto qs = ck.find(w.name + ".qs");
  if (qs) {
    const bool shapes_ok = t->entry->dtype == Dtype::kU8 && t->entry->shape.size() == 1 &&
                           qs->entry->dtype == Dtype::kF32 && qs->entry->shape.size() == 1;
    const auto fmt_ = shapes_ok && w.shape.size() == 2
                          ? detect_container_format(w.shape[0], w.shape[1], t->entry->byte_size(),
                                                    qs->entry->byte_size())
                          : std::nullopt;
    if (!fmt_) {
      rep.unloadable.push_back(
          fmt::format("{}: {} bytes + {} scale bytes fit no int8/int4 layout for [{}]", w.name,
                      t->entry->byte_size(), qs->entry->byte_size(), fmt::join(w.shape, ", ")));
      return;
    }
    ++rep.formats[fmt_->name()];
    return;
  }
  const Dtype d = t->entry->dtype;
  if (t->entry->shape != w.shape) {
    rep.unloadable.push_back(fmt::format("{}: shape [{}] but config implies [{}]", w.name,
                                         fmt::join(t->entry->shape, ", "),
                                         fmt::join(w.shape, ", ")));
    return;
  }
  if (d == Dtype::kF8E4M3 && ck.find(w.name + kScaleInvSuffix)) {
    ++rep.formats["fp8-block"];
  } else if (d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF32) {
    ++rep.formats[std::string(dtype_info(d).name)];
  } else {
    rep.unloadable.push_back(
        fmt::format("{}: {} without .qs is not a float tensor", w.name, dtype_info(d).safetensors));
  }
}

}  // namespace

Result<CheckLoadReport> check_load(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(dir));
  QR_ASSIGN_OR_RETURN(cfg, load_moe_config(ck.directory()));
  if (!cfg) {
    return Error(ErrorKind::kInvalidConfig, "no config.json to check against").in_file(dir);
  }
  CheckLoadReport rep;
  for_each_model_weight(*cfg, [&](const ModelWeight& w) {
    if (w.main_pass) check_weight(ck, w, rep);
  });
  return rep;
}

}  // namespace qrepack
