// validate_qat_checkpoint: the MIP-QAT checkpoint's expert weights before any conversion.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <set>

#include "core/problems.h"
#include "kernels/kernels.h"
#include "qrepack/formats/float16.h"
#include "qrepack/omega/qat_convert.h"

namespace qrepack {
namespace {

constexpr std::string_view kPrefix = "paligemma_with_expert.gemma_expert.model.layers.";
constexpr std::array<std::string_view, 7> kProjections = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
constexpr std::string_view kWeight = ".weight";

// "<digits>.<projection>.weight" and nothing after: the layer index and projection.
std::optional<std::pair<std::uint64_t, std::size_t>> parse_tail(std::string_view s) {
  std::size_t d = 0;
  std::uint64_t layer = 0;
  while (d < s.size() && s[d] >= '0' && s[d] <= '9') {
    if (d < 9) layer = layer * 10 + static_cast<std::uint64_t>(s[d] - '0');
    ++d;
  }
  if (d == 0 || d >= s.size() || s[d] != '.') return std::nullopt;
  const std::string_view rest = s.substr(d + 1);
  for (std::size_t p = 0; p < kProjections.size(); ++p) {
    if (rest.size() == kProjections[p].size() + kWeight.size() &&
        rest.starts_with(kProjections[p]) && rest.ends_with(kWeight)) {
      return std::pair{d > 9 ? UINT64_MAX : layer, p};
    }
  }
  return std::nullopt;
}

// The (layer, projection) of an expert weight: the include pattern may match at any start.
std::optional<std::pair<std::uint64_t, std::size_t>> expert_slot(std::string_view name) {
  for (std::size_t at = name.find(kPrefix); at != std::string_view::npos;
       at = name.find(kPrefix, at + 1)) {
    if (auto slot = parse_tail(name.substr(at + kPrefix.size()))) return slot;
  }
  return std::nullopt;
}

bool is_float_weight(Dtype d) { return d == Dtype::kF16 || d == Dtype::kBF16 || d == Dtype::kF32; }

// dtype, rank and shape of one weight; true when it may be read.
bool check_shape(const QatLayer& l, Problems& p) {
  const TensorEntry& t = *l.tensor;
  auto bad = [&](std::string why) {
    p.add(ErrorKind::kInvalidRecord, fmt::format("tensor '{}': {}", t.name, why));
  };
  if (!is_float_weight(t.dtype)) {
    bad(fmt::format("dtype {} must be F16, BF16 or F32", dtype_info(t.dtype).name));
    return false;
  }
  if (t.shape.size() != 2 || t.shape[0] == 0 || t.shape[1] == 0 || t.shape[0] % kQatRotationBlock ||
      t.shape[1] % kQatRotationBlock) {
    bad("must be 2-D [N, K] with N and K positive multiples of 64 (the consumer's rotation "
        "block)");
    return false;
  }
  if (t.numel() > kMaxQatWeightElements) {
    p.add(ErrorKind::kLimitExceeded, fmt::format("tensor '{}': {} elements exceed the cap of {}",
                                                 t.name, t.numel(), kMaxQatWeightElements));
    return false;
  }
  return true;
}

// One hidden width: q, k, v, gate, up read it (K) and o, down write it (N); q's N is o's K and
// gate's and up's N are down's K (gemma_300m: 1024, 2048, 4096).
void check_widths(const std::vector<QatLayer>& layers, Problems& p) {
  std::map<std::string, std::uint64_t> first;  // rule -> the first layer's value
  const auto same = [&](const std::string& rule, std::uint64_t v, const std::string& name) {
    const auto [it, added] = first.emplace(rule, v);
    if (!added && it->second != v) {
      p.add(ErrorKind::kInvalidRecord,
            fmt::format("tensor '{}.weight': {} is {}, another layer's is {} (one model has one "
                        "width)",
                        name, rule, v, it->second));
    }
  };
  for (const QatLayer& l : layers) {
    const std::size_t proj = expert_slot(l.tensor->name)->second;
    const bool writes_hidden = proj == 3 || proj == 6;  // o_proj, down_proj
    same("the hidden width", writes_hidden ? l.n : l.k, l.name);
    if (proj == 0 || proj == 3) same("the attention width", proj == 0 ? l.n : l.k, l.name);
    if (proj >= 4) same("the MLP width", proj == 6 ? l.k : l.n, l.name);
    if (proj == 1 || proj == 2) same("the KV width", l.n, l.name);
  }
}

// The 126 (layer, projection) slots exactly once each.
void check_coverage(const std::vector<std::pair<std::uint64_t, std::size_t>>& slots, Problems& p) {
  std::set<std::pair<std::uint64_t, std::size_t>> seen;
  for (const auto& s : slots) {
    if (s.first >= kPi05ExpertLayers) {
      p.add(ErrorKind::kRecordCount,
            fmt::format("expert layer {} is beyond pi0.5's {} layers", s.first, kPi05ExpertLayers));
    } else if (!seen.insert(s).second) {
      p.add(ErrorKind::kRecordCount,
            fmt::format("layers.{}.{} appears twice", s.first, kProjections[s.second]));
    }
  }
  std::vector<std::string> missing;
  for (std::uint64_t i = 0; i < kPi05ExpertLayers; ++i) {
    for (std::size_t j = 0; j < kProjections.size(); ++j) {
      if (!seen.count({i, j})) missing.push_back(fmt::format("layers.{}.{}", i, kProjections[j]));
    }
  }
  if (!missing.empty()) {
    p.add(ErrorKind::kRecordCount,
          fmt::format("{} of pi0.5's {} expert projections are missing (first: {}; pass "
                      "--select or --expected-records N for a subset)",
                      missing.size(), kPi05ExpertRecordCount, missing.front()));
  }
}

// The fp16 code of every BF16 code (f16_encode of its exact value: round to nearest even), so
// a BF16 weight casts by lookup.

}  // namespace

std::optional<std::string> qat_expert_layer(std::string_view tensor) {
  if (!expert_slot(tensor)) return std::nullopt;
  return std::string(tensor.substr(0, tensor.size() - kWeight.size()));
}

Result<std::span<const std::uint16_t>> read_qat_weight_fp16(const SafetensorsFile& ck,
                                                            const TensorEntry& t,
                                                            QatReadBuffers& buffers) {
  if (!is_float_weight(t.dtype) || t.numel() > kMaxQatWeightElements) {
    return Error(ErrorKind::kInvalidRecord, "not an F16/BF16/F32 weight within the cap")
        .in_file(ck.path())
        .in_tensor(std::string(t.name));
  }
  const std::uint64_t n = t.numel();
  if (buffers.raw.size() < t.byte_size()) buffers.raw.resize(t.byte_size());
  if (buffers.fp16.size() < n) buffers.fp16.resize(n);
  const std::span<std::uint8_t> raw(buffers.raw.data(), t.byte_size());
  const std::span<std::uint16_t> h(buffers.fp16.data(), n);
  QR_TRY(ck.read(t, 0, raw));
  const auto u16 = [&raw](std::uint64_t i) {
    return static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
  };
  if (t.dtype == Dtype::kF16) {
    for (std::uint64_t i = 0; i < n; ++i) h[i] = u16(i);
    return std::span<const std::uint16_t>(h);
  }
  // BF16 and F32 through f32 in cache-sized chunks: the SIMD decode and the binary16
  // conversion (each bit-identical with f16_encode(bf16_decode(x)), the reference table).
  constexpr std::uint64_t kChunk = 16384;
  if (buffers.f32.size() < kChunk) buffers.f32.resize(kChunk);
  for (std::uint64_t at = 0; at < n; at += kChunk) {
    const std::uint64_t m = std::min(kChunk, n - at);
    const float* f = buffers.f32.data();
    if (t.dtype == Dtype::kBF16) {
      std::uint16_t half[kChunk];
      for (std::uint64_t i = 0; i < m; ++i) half[i] = u16(at + i);
      kernels::bf16_to_f32(half, m, buffers.f32.data());  // non-finite values decode too
    } else {
      for (std::uint64_t i = 0; i < m; ++i) {
        std::uint32_t bits = 0;
        for (int b = 3; b >= 0; --b) {
          bits = (bits << 8) | raw[4 * (at + i) + static_cast<std::uint64_t>(b)];
        }
        buffers.f32[i] = std::bit_cast<float>(bits);
      }
    }
    kernels::f32_to_f16(f, m, h.data() + at);
  }
  return std::span<const std::uint16_t>(h);
}

Result<QatValidation> validate_qat_checkpoint(const SafetensorsFile& ck,
                                              const QatValidateOptions& o) {
  QatValidation out;
  std::vector<std::pair<std::uint64_t, std::size_t>> slots;
  for (const TensorEntry& t : ck.tensors()) {
    const auto slot = expert_slot(t.name);
    if (!slot) continue;
    ++out.matched;
    slots.push_back(*slot);
    const std::string name(t.name.substr(0, t.name.size() - kWeight.size()));
    if (o.select && !o.select->search(name)) continue;
    const std::uint64_t n = t.shape.size() == 2 ? t.shape[0] : 0;
    const std::uint64_t k = t.shape.size() == 2 ? t.shape[1] : 0;
    out.layers.push_back({name, &t, n, k});
  }
  std::sort(out.layers.begin(), out.layers.end(),
            [](const QatLayer& a, const QatLayer& b) { return a.name < b.name; });
  const auto fail = [&](Error e) { return std::move(e.in_file(ck.path()).with_rule("omega.qat")); };
  if (out.layers.empty()) {
    return fail(
        Error(ErrorKind::kRecordCount,
              "no action-expert projection weights matched "
              "(paligemma_with_expert.gemma_expert.model.layers.N.{self_attn,mlp}.*.weight)"));
  }
  Problems p;
  out.expected = o.expected_records ? *o.expected_records
                 : o.select         ? out.layers.size()
                                    : kPi05ExpertRecordCount;
  if (!o.select && !o.expected_records) {
    check_coverage(slots, p);  // exactly the 126 slots, so also the count
  } else if (out.layers.size() != out.expected) {
    p.add(ErrorKind::kRecordCount,
          fmt::format("{} expert weights selected, {} expected", out.layers.size(), out.expected));
  }
  bool shapes_ok = true;
  for (const QatLayer& l : out.layers) shapes_ok = check_shape(l, p) && shapes_ok;
  if (shapes_ok) check_widths(out.layers, p);
  if (!p.empty()) return fail(p.to_error(20));
  QatReadBuffers buffers;
  for (const QatLayer& l : out.layers) {  // every value must survive the cast to fp16
    QR_ASSIGN_OR_RETURN(h, read_qat_weight_fp16(ck, *l.tensor, buffers));
    const auto bad = std::find_if(h.begin(), h.end(), [](std::uint16_t v) {
      return (v & 0x7C00u) == 0x7C00u;  // exponent all ones: inf or NaN
    });
    if (bad != h.end()) {
      p.add(ErrorKind::kNonFiniteWeight,
            fmt::format("tensor '{}': element {} is NaN or Inf in fp16 (non-finite, or beyond "
                        "fp16's 65504)",
                        l.tensor->name, bad - h.begin()));
    }
  }
  if (!p.empty()) return fail(p.to_error(20));
  return out;
}

}  // namespace qrepack
