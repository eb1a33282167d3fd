#include "qrepack/verify/check_load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/plan/rules.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {

namespace {

// One weight the engine loads: present, and in a layout the engine's loader accepts.
void check_weight(const Checkpoint& ck, const FormatStamps& stamps, const ModelWeight& w,
                  CheckLoadReport& rep) {
  ++rep.checked;
  const auto t = ck.find(w.name);
  if (!t) {
    rep.missing.push_back(w.name);
    return;
  }
  const auto qs = ck.find(w.name + ".qs");
  if (qs) {
    const Dtype wd = t->entry->dtype;
    if ((wd != Dtype::kU8 && wd != Dtype::kI8) || qs->entry->dtype != Dtype::kF32 ||
        w.shape.size() != 2) {
      rep.unloadable.push_back(
          fmt::format("{}: a .qs container needs U8/I8 codes and F32 scales", w.name));
      return;
    }
    const auto cf = resolve_container_format(w.shape[0], w.shape[1], t->entry->byte_size(),
                                             qs->entry->byte_size(), find_stamp(stamps, w.name));
    if (!cf.ok()) {
      rep.unloadable.push_back(
          fmt::format("{}: {} (rule {})", w.name, cf.error().message(), cf.error().rule()));
      return;
    }
    ++rep.formats[cf->name()];
    return;
  }
  const Dtype d = t->entry->dtype;
  if (!std::ranges::equal(t->entry->shape, w.shape)) {
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

Result<CheckLoadReport> check_load(const std::string& dir, bool include_main) {
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(dir));
  QR_ASSIGN_OR_RETURN(cfg, load_moe_config(ck.directory()));
  if (!cfg) {
    return Error(ErrorKind::kInvalidConfig, "no config.json to check against").in_file(dir);
  }
  QR_ASSIGN_OR_RETURN(stamps, read_format_stamps(ck));
  CheckLoadReport rep;
  // The engine loads the MTP head and the DSA indexer when their tensors are there: a pass
  // that wrote any of them must have written all (what the --mtp / --indexer rules convert).
  const auto pass_of = [&](const ModelWeight& w) -> std::optional<ConvertPass> {
    if (w.main_pass) return ConvertPass::kMain;
    RuleContext ctx{family_rules(&*cfg), cfg->num_hidden_layers};
    ctx.pass = weight_pass(w.name, cfg->num_hidden_layers);
    if (!pass_converts(w.name, ctx)) return std::nullopt;
    return ctx.pass;
  };
  bool pass_present[3] = {include_main, false, false};
  for_each_model_weight(*cfg, [&](const ModelWeight& w) {
    const auto p = pass_of(w);
    if (p && *p != ConvertPass::kMain && ck.find(w.name)) pass_present[static_cast<int>(*p)] = true;
  });
  for (ConvertPass p : {ConvertPass::kMtp, ConvertPass::kIndexer}) {
    if (pass_present[static_cast<int>(p)]) rep.passes.push_back(convert_pass_name(p));
  }
  for_each_model_weight(*cfg, [&](const ModelWeight& w) {
    const auto p = pass_of(w);
    if (p && pass_present[static_cast<int>(*p)]) check_weight(ck, stamps, w, rep);
  });
  return rep;
}

}  // namespace qrepack
