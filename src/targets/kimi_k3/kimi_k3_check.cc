// check-load for Kimi K3: what c/kimi_k3.c checks when it opens a directory, which is the same
// code for the original release and for a colibri-kimi-k3 container (reference/colibri-engines.md
// §1.12; the loader's load_cfg, model_init, w_load, f32_load, expert_table_init and its shared
// st.h reader). Config keys and ranges as load_cfg (targets/kimi_k3_contract.h); the text
// prefix "language_model." when layer 0's input_layernorm only exists under it; every tensor
// model_init reads:
//   float (norms, AttnRes, router, convs, ...)  BF16 / F16 / F32 of exactly the config's count
//                                               (A_log: at least one per KDA head)
//   quantized classes                           U8 / I8 with <name>.qs: int8 (O*I bytes, O
//                                               scales) or int4-g64 (I % 64 == 0, O*I/2 bytes,
//                                               O*I/64 scales), scales a float tensor; else a
//                                               float tensor of O*I elements
//   routed experts                              exactly the MXFP4 byte counts, any dtype
// and every tensor of every file a dtype st.h indexes (it exits on any other). Stricter than
// the loader: a missing expert is an error (it warns and aborts when a token routes there), and
// the final norm and lm_head are required (without them it runs trace-only).
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "targets/container/check_load_parts.h"
#include "targets/kimi_k3/kimi_k3_contract.h"
#include "targets/releases/release_check.h"

namespace qrepack {
namespace {

// The dtypes st.h's st_dtype_code accepts.
bool st_indexes(Dtype d) {
  constexpr std::array kKnown = {Dtype::kBF16,   Dtype::kF16, Dtype::kF32,
                                 Dtype::kU8,     Dtype::kI8,  Dtype::kF8E4M3,
                                 Dtype::kF8E8M0, Dtype::kI64, Dtype::kU64};
  return std::find(kKnown.begin(), kKnown.end(), d) != kKnown.end();
}

// w_load: a pre-quantized U8 / I8 tensor with its .qs, else a float matrix of O*I elements.
void quantized_matrix(Loader& l, const std::string& name, const K3Expect& e) {
  const auto t = l.get(name);
  if (!t) return;
  const Dtype dt = t->entry->dtype;
  if (dt != Dtype::kU8 && dt != Dtype::kI8) {
    l.float_tensor(name, e.rows * e.cols);
    return;
  }
  const auto qs = l.ck().find(name + ".qs");
  if (!qs) {
    l.bad(name, "quantized (U8) but no .qs scale sidecar");
    return;
  }
  const std::uint64_t bytes = t->entry->byte_size(), scales = qs->entry->numel();
  const bool int8 = bytes == e.rows * e.cols && scales == e.rows;
  const bool int4 =
      e.cols % 64 == 0 && bytes == e.rows * (e.cols / 2) && scales == e.rows * (e.cols / 64);
  if (!int8 && !int4) {
    l.bad(name, fmt::format("U8 tensor is {} bytes / {} scales, matches neither int8 [{}, {}] "
                            "nor int4-g64",
                            bytes, scales, e.rows, e.cols));
  } else if (!is_float(qs->entry->dtype)) {
    l.bad(name + ".qs", "scales must be F32 / BF16 / F16");
  } else {
    l.report().checked += 2;
  }
}

void expert_tensor(Loader& l, const std::string& name, const K3Expect& e) {
  const auto t = l.get(name);
  if (!t) return;
  if (t->entry->byte_size() != e.rows * e.cols) {
    l.bad(name, fmt::format("{} bytes, expected {}", t->entry->byte_size(), e.rows * e.cols));
  } else {
    ++l.report().checked;
  }
}

void float_at_least(Loader& l, const std::string& name, std::uint64_t n) {
  const auto t = l.get(name);
  if (!t) return;
  if (!is_float(t->entry->dtype) || t->entry->numel() < n) {
    l.bad(name, fmt::format("{} {} elements, the loader reads at least {} float elements",
                            dtype_info(t->entry->dtype).safetensors, t->entry->numel(), n));
  } else {
    ++l.report().checked;
  }
}

}  // namespace

Status check_kimi_k3(Loader& l, const Json& config) {
  auto& r = l.report();
  for (const TensorRef t : l.ck().tensors()) {
    if (!st_indexes(t.entry->dtype)) {
      l.bad(std::string(t.entry->name),
            fmt::format("dtype {} is one st.h does not index (it exits at startup)",
                        dtype_info(t.entry->dtype).safetensors));
    }
  }
  auto dims = read_k3_dims(config);
  if (!dims.ok()) {
    r.unloadable.push_back(dims.error().message());
    return ok_status();
  }
  const std::string probe = "model.layers.0.input_layernorm.weight";
  const std::string prefix =
      !l.ck().find(probe) && l.ck().find("language_model." + probe) ? "language_model." : "";
  for_each_k3_tensor(*dims, [&](const std::string& n, const K3Expect& e) {
    const std::string name = prefix + n;
    switch (e.cls) {
      case K3Class::kExpert:
        expert_tensor(l, name, e);
        break;
      case K3Class::kFloat:
        if (e.at_least) {
          float_at_least(l, name, e.rows);
        } else {
          l.float_tensor(name, e.rows);
        }
        break;
      default:
        quantized_matrix(l, name, e);
    }
  });
  return ok_status();
}

Status check_kimi_k3_release(const ReleaseInput& in, Loader& l) {
  return check_kimi_k3(l, in.config);
}

}  // namespace qrepack
