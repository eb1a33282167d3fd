#include "plan/glm_layout.h"

#include <fmt/format.h>

#include <string>

#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/core/checked.h"
#include "qrepack/schemes/e8_iq3.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/verify/container_format.h"

namespace qrepack {

// fp8-passthrough keeps float embeddings and heads as stored, as the engine's FP8 repack
// does (it never makes them FP8).
bool GlmLayout::keeps_io_as_stored(const PlanEntry& e, const LogicalWeight& w) const {
  return o_.scheme.kind == SchemeKind::kFp8Passthrough && e.cls == WeightClass::kIo &&
         e.disposition == Disposition::kQuantize && w.encoding == SourceEncoding::kFloat;
}

// Step 2: the scheme, or the weight's bits for schemes that have them (the engine
// converter's dispatch, reference/colibri.md §1.4).
void GlmLayout::choose_encoding(PlanEntry& e, const LogicalWeight& w) const {
  switch (o_.scheme.kind) {
    case SchemeKind::kFp8Passthrough:
      e.encoding = e.cls == WeightClass::kIo ? Encoding::kBf16 : Encoding::kFp8Container;
      e.stamped = stamps(e.cls);
      return;
    case SchemeKind::kBf16:
      e.encoding = Encoding::kBf16;
      return;
    case SchemeKind::kF32:
      e.encoding = Encoding::kF32;
      return;
    case SchemeKind::kFp8Block128:
      e.encoding = Encoding::kFp8Block;
      return;
    default:
      break;
  }
  const std::uint64_t group = o_.scheme.kind == SchemeKind::kInt4Group ? o_.scheme.group
                              : o_.scheme.kind == SchemeKind::kInt3G64 ? kInt3Group
                                                                       : 0;
  e.bits = weight_bits(o_, e.cls, w.name);
  switch (e.bits) {
    case kE8Bits:
      e.encoding = Encoding::kE8;
      return;
    case 16:
      e.encoding = Encoding::kBf16;
      return;
    case 8:
      e.encoding = Encoding::kInt8;
      return;
    case 3:
      e.encoding = Encoding::kInt3;
      return;
    case 2:
      if (group == 0) {
        e.encoding = Encoding::kInt2;
        return;
      }
      break;
    default:
      break;
  }
  e.encoding = Encoding::kInt4;  // bits 4, or 2 with a group (the converter's grouped branch)
  e.group = group;
}

// The classes the engine looks a stamp up for (resident tensors it loads through
// qt_from_disk); routed experts and the catch-alls (MTP projections, indexer) are never
// consulted, so never stamped.
bool GlmLayout::stamps(WeightClass c) {
  return c == WeightClass::kAttention || c == WeightClass::kOProj || c == WeightClass::kKvB ||
         c == WeightClass::kSharedExpert || c == WeightClass::kDenseMlp;
}

// An engine container must read back, by the engine's byte-count rules and stamp, as the
// format it was written in: shapes where two formats' byte counts coincide are refused.
bool GlmLayout::reads_back_as_written(const PlanEntry& e, const LogicalWeight& w) {
  if (e.encoding == Encoding::kE8 && !e8_applies(e, w)) return false;
  std::optional<ContainerFormat> want;
  switch (e.encoding) {
    case Encoding::kE8:
      want = ContainerFormat{ContainerFormat::kE8Iq3};
      break;
    case Encoding::kInt8:
      want = ContainerFormat{ContainerFormat::kInt8Row};
      break;
    case Encoding::kInt2:
      want = ContainerFormat{ContainerFormat::kInt2Row};
      break;
    case Encoding::kInt3:
      want = ContainerFormat{ContainerFormat::kInt3G64};
      break;
    case Encoding::kFp8Container:
      want = ContainerFormat{ContainerFormat::kFp8Block};
      break;
    case Encoding::kInt4:
      want = e.group && ceil_div(w.shape[1], e.group) > 1
                 ? ContainerFormat{ContainerFormat::kInt4Group, e.group}
                 : ContainerFormat{ContainerFormat::kInt4Row};
      break;
    default:
      return true;
  }
  const TensorView& data = out_.plan().outputs[e.outputs[0]];
  const TensorView& scales = out_.plan().outputs[e.outputs[1]];
  const std::uint64_t nb = checked_numel(data.shape).value_or(0);
  const std::uint64_t ns = 4 * checked_numel(scales.shape).value_or(0);
  const std::string stamp(kFp8StampName);
  const auto got =
      resolve_container_format(w.shape[0], w.shape[1], nb, ns, e.stamped ? &stamp : nullptr);
  if (got.ok() && *got == *want) return true;
  out_.problems().add(
      ErrorKind::kUnexpectedShape,
      fmt::format("tensor '{}': [{}, {}] in {} would {} in the engine (its byte "
                  "counts coincide with another format's){}; give it other --bits "
                  "(rule container.collision)",
                  w.name, w.shape[0], w.shape[1], want->name(),
                  got.ok() ? "read back as " + got->name() : "be refused: " + got.error().message(),
                  e.encoding == Encoding::kFp8Container && !e.stamped
                      ? " and the engine never consults a stamp for it"
                      : ""));
  return false;
}

// E8/IQ3 takes routed experts whose input width is a multiple of its 256-weight blocks.
bool GlmLayout::e8_applies(const PlanEntry& e, const LogicalWeight& w) {
  if (e.cls != WeightClass::kRoutedExpert) {
    out_.problems().add(ErrorKind::kUsage,
                        fmt::format("tensor '{}': e8 (E8/IQ3, fmt 6) is for routed experts only, "
                                    "and this is {} (rule e8.class)",
                                    w.name, weight_class_name(e.cls)));
    return false;
  }
  if (w.shape[1] % kE8Block != 0) {
    out_.problems().add(ErrorKind::kUnexpectedShape,
                        fmt::format("tensor '{}': [{}, {}]: e8 (E8/IQ3, fmt 6) needs the input "
                                    "width to be a multiple of 256 (rule e8.shape)",
                                    w.name, w.shape[0], w.shape[1]));
    return false;
  }
  return true;
}

// Step 3: the output tensors an encoding produces, named by the engine's conventions. Their
// names and shapes view the weight, the checkpoint or the plan's arena.
void GlmLayout::add_encoded_outputs(PlanEntry& e, const LogicalWeight& w) {
  const std::uint64_t rows = w.shape[0], cols = w.shape[1];
  const auto add = [&](Dtype d, std::span<const std::uint64_t> data_shape,
                       std::string_view scale_suffix,
                       std::initializer_list<std::uint64_t> scale_shape) {
    out_.add_output(e, {w.name, d, data_shape});
    out_.add_output(e, {out_.suffixed(w.name, scale_suffix), Dtype::kF32, out_.dims(scale_shape)});
  };
  switch (e.encoding) {
    case Encoding::kInt4: {
      const std::uint64_t g = e.group ? e.group : cols;
      add(Dtype::kU8, out_.dims({rows * ((cols + 1) / 2)}), ".qs", {rows * ceil_div(cols, g)});
      return;
    }
    case Encoding::kInt8:
      add(Dtype::kU8, out_.dims({rows * cols}), ".qs", {rows});
      return;
    case Encoding::kInt2:
      add(Dtype::kU8, out_.dims({rows * int2_row_bytes(cols)}), ".qs", {rows});
      return;
    case Encoding::kInt3:
      add(Dtype::kU8, out_.dims({rows * int3_row_bytes(cols)}), ".qs",
          {rows * ceil_div(cols, kInt3Group)});
      return;
    case Encoding::kE8:
      add(Dtype::kU8, out_.dims({rows * ceil_div(cols, kE8Block) * kE8BlockBytes}), ".qs", {1});
      return;
    case Encoding::kFp8Container:
      add(Dtype::kU8, w.shape, ".qs", {ceil_div(rows, 128) * ceil_div(cols, 128)});
      return;
    case Encoding::kBf16:
      out_.add_output(e, {w.name, Dtype::kBF16, w.shape});
      return;
    case Encoding::kF32:
      out_.add_output(e, {w.name, Dtype::kF32, w.shape});
      return;
    case Encoding::kFp8Block:
      add(Dtype::kF8E4M3, w.shape, kScaleInvSuffix, {ceil_div(rows, 128), ceil_div(cols, 128)});
      return;
    case Encoding::kRaw:
      return;
  }
}

}  // namespace qrepack
