// colibri-inkling-dense: inkling.c's optional dense overlay (upstream
// convert_inkling_dense_int4.py; reference/colibri-engines.md §1.13), built from a colibri-inkling
// container. One file, dense.safetensors, for <container>/dense-int4g64/. Every tensor but the
// routed experts, in name order, by the first rule that matches:
//   1. routed experts                      left out (they stay in the container)
//   2. not BF16 / F16 / F32                raw
//   3. embed_tokens, lm_head               int8 per row
//   4. norm, bias, A_log, dt_bias, conv1d, .gate., rotary, ...scale (any case)   raw
//   5. self_attn (unless --bits attn=4)    int8 per row
//   6. rank < 2, last dim < 64 or under 2^20 elements   raw
//   7. otherwise                           int4, groups of 64 along the last dim
// Shapes are flattened to [R, last dim]. int8: scale amax / 127 (0 -> 1), codes clamped to
// +-127, I8 [R, I] + .qs F32 [R]. int4-g64: scale amax / 7 (0 -> 1), offset-binary nibbles, low
// = even column, each row padded to a byte with nibble 8, U8 [R, ceil(I/2)] + .qs F32 [R, ng].
// raw: the bytes as stored. Header as upstream writes it by hand: entries in that order (each
// .qs right after its tensor), no padding between tensors, __metadata__ last with one
// "fmt=4;gs=64;I=..;orig=AxB" / "fmt=1;orig=.." / "fmt=raw" per tensor, then "colibri.dense".
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <set>

#include "qrepack/core/checked.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"
#include "targets/inkling/inkling_layout.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kTarget = "colibri-inkling-dense (inkling.c's dense-int4g64/)";
constexpr std::uint64_t kGroup = 64;
constexpr std::uint64_t kMinElements = std::uint64_t{1} << 20;

enum class DenseKind : std::uint8_t { kRaw, kInt8, kInt4G64 };

bool is_float(Dtype d) { return d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF32; }

// Rule 4: the small, sensitive tensors, matched anywhere in the name, any case.
bool small_by_name(std::string_view name) {
  std::string low(name);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view w : {"norm", "bias", "a_log", "dt_bias", "conv1d", ".gate.", "rotary"}) {
    if (low.find(w) != std::string::npos) return true;
  }
  return low.ends_with("scale");
}

DenseKind classify(const TensorEntry& t, int attn_bits) {
  if (!is_float(t.dtype)) return DenseKind::kRaw;
  const std::string_view n = t.name;
  if (n.find("embed_tokens") != std::string_view::npos ||
      n.find("lm_head") != std::string_view::npos) {
    return DenseKind::kInt8;
  }
  if (small_by_name(n)) return DenseKind::kRaw;
  if (n.find("self_attn") != std::string_view::npos && attn_bits == 8) return DenseKind::kInt8;
  if (t.shape.size() < 2 || t.shape.back() < kGroup || t.numel() < kMinElements) {
    return DenseKind::kRaw;
  }
  return DenseKind::kInt4G64;
}

// The routed experts of the container: model.layers.L.mlp.experts.{gate_up_proj,down_proj}
// and their .qs.
bool routed_expert(std::string_view rest) {
  for (std::string_view x : {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}) {
    if (rest == x || (rest.starts_with(x) && rest.substr(x.size()) == ".qs")) return true;
  }
  return false;
}

std::string dims_x(std::span<const std::uint64_t> s) {
  return fmt::format("{}", fmt::join(s, "x"));
}

class InklingDensePlanner {
 public:
  InklingDensePlanner(const Checkpoint& ck, const ContainerOptions& o) : ck_(ck), o_(o) {}

  Result<ContainerPlan> run() {
    if (o_.scheme != "int4-g64" || o_.expert_bits || o_.down_bits || o_.down_group) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--target colibri-inkling-dense writes the fixed int4-g64 / int8 "
                               "overlay inkling.c reads (--bits attn=4 moves attention to "
                               "int4-g64), not --to {}{}",
                               o_.scheme, o_.expert_bits || o_.down_bits ? " with --bits" : ""))
          .with_rule("target.scheme");
    }
    attn_bits_ = o_.attn_bits ? o_.attn_bits : 8;
    if (attn_bits_ != 8 && attn_bits_ != 4) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits attn={}: the overlay holds attention as int8 (8, the "
                               "default) or int4-g64 (4)",
                               attn_bits_))
          .with_rule("target.scheme");
    }
    QR_ASSIGN_OR_RETURN(config, read_config(dir(), "colibri-inkling-dense"));
    QR_ASSIGN_OR_RETURN(d, read_inkling_dims(config, dir()));
    plan_.family = "inkling";
    plan_.model_type = json_string(config, "model_type", "inkling_mm_model");
    plan_.recognized = std::make_shared<Recognized>();
    QR_TRY(check(d));
    build();
    return std::move(plan_);
  }

 private:
  const std::string& dir() const { return ck_.directory(); }

  // Every name is the container's: a resident of the config's shape, a routed expert, or the
  // audio tower (kept by the int4 converter's --keep-audio).
  Status check(const InklingDims& d) {
    const auto residents = inkling_residents(d);
    std::vector<std::string> problems;
    std::set<std::string_view> seen;
    for (const TensorRef t : ck_.tensors()) {
      const std::string_view n = t.entry->name;
      const std::string file = fs::path(ck_.shards()[t.shard].path()).filename().string();
      if (file.starts_with("dense-")) {
        problems.push_back(
            fmt::format("{} (in {}: files named dense-* are overlays, not read)", n, file));
        continue;
      }
      const std::vector<std::uint64_t> shape(t.entry->shape.begin(), t.entry->shape.end());
      if (const auto it = residents.find(std::string(n)); it != residents.end()) {
        if (shape != it->second.shape) {
          problems.push_back(
              fmt::format("{}: shape [{}], config.json implies [{}] (rule "
                          "inkling.shape)",
                          n, fmt::join(shape, ", "), fmt::join(it->second.shape, ", ")));
        }
        seen.insert(n);
        continue;
      }
      const auto layer = split_index(n, "model.layers.");
      if (layer && layer->first < d.layers && d.sparse[layer->first] &&
          routed_expert(layer->second)) {
        continue;
      }
      if ((n == "model.audio.encoder.weight" && shape.size() == 2 && shape[1] == d.hidden) ||
          (n == "model.audio.final_norm.weight" && shape == std::vector<std::uint64_t>{d.hidden})) {
        continue;
      }
      problems.push_back(std::string(n));
    }
    for (const auto& [name, r] : residents) {
      if (!r.optional && !seen.contains(name)) {
        problems.push_back(
            fmt::format("missing {} (the container inkling.c loads holds it)", name));
      }
    }
    if (problems.empty()) return ok_status();
    std::sort(problems.begin(), problems.end());
    return unknown_tensors_error(dir(), kTarget, problems);
  }

  const LogicalWeight* rows(const TensorRef& raw, std::uint64_t r, std::uint64_t i) {
    const std::array<std::uint64_t, 2> shape{r, i};
    LogicalWeight w;
    w.name = raw.entry->name;
    w.shape = WeightShape(shape);
    w.data = raw;
    w.source_dtype = raw.entry->dtype;
    plan_.recognized->weights.push_back(w);
    return &plan_.recognized->weights.back();
  }

  void build() {
    plan_.recognized->weights.reserve(ck_.tensors().size());  // the views stay put
    ContainerBuilder b(plan_);
    b.file("dense.safetensors");
    std::vector<std::pair<std::string, std::string>> meta;
    QuantRule int8;
    int8.bits = 8;
    int8.symmetric = true;
    int8.zero_group_scale_one = true;
    int8.amax_floor = 0.0f;
    QuantRule int4 = int8;
    int4.bits = 4;
    int4.group = kGroup;
    int4.symmetric = false;
    int4.byte_rows = true;
    int4.nibbles = Nibbles::kOffsetBinary;
    for (const std::uint32_t k : ck_.by_name()) {
      const TensorRef t = ck_.tensors()[k];
      const TensorEntry& e = *t.entry;
      const std::string name(e.name);
      const auto layer = split_index(e.name, "model.layers.");
      if (layer && routed_expert(layer->second)) {
        b.source(e.name, "drop", "inkling_dense.routed_experts_stay_in_the_container");
        b.count("routed experts left out (they stay in the container)");
        continue;
      }
      const std::uint64_t cols = e.shape.empty() ? 1 : e.shape.back();
      const std::uint64_t r = cols ? e.numel() / cols : 0;
      switch (classify(e, attn_bits_)) {
        case DenseKind::kRaw:
          b.copy(t, name);
          meta.emplace_back(name, "fmt=raw");
          b.source(e.name, "keep", "inkling_dense.raw");
          b.count("raw (as stored)");
          break;
        case DenseKind::kInt8:
          b.quant({{rows(t, r, cols), int8}}, name, Dtype::kI8, {r, cols}, name + ".qs", {r});
          meta.emplace_back(name, fmt::format("fmt=1;orig={}", dims_x(e.shape)));
          b.source(e.name, "convert", "inkling_dense.int8_row");
          b.count("int8 per row");
          break;
        case DenseKind::kInt4G64:
          b.quant({{rows(t, r, cols), int4}}, name, Dtype::kU8, {r, (cols + 1) / 2}, name + ".qs",
                  {r, ceil_div(cols, kGroup)});
          meta.emplace_back(name,
                            fmt::format("fmt=4;gs={};I={};orig={}", kGroup, cols, dims_x(e.shape)));
          b.source(e.name, "convert", "inkling_dense.int4_g64");
          b.count("int4-g64");
          break;
      }
    }
    meta.emplace_back("colibri.dense", "inkling-int4g64-v1");
    plan_.files.back().metadata_last = std::move(meta);
  }

  const Checkpoint& ck_;
  const ContainerOptions& o_;
  int attn_bits_ = 8;
  ContainerPlan plan_;
};

}  // namespace

Result<ContainerPlan> plan_inkling_dense(const Checkpoint& ck, const ContainerOptions& o) {
  return InklingDensePlanner(ck, o).run();
}

}  // namespace qrepack
