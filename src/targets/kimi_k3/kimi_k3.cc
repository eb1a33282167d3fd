// colibri-kimi-k3: upstream k3_repack.py's container for c/kimi_k3.c
// (reference/colibri-engines.md §1.12). One output per source shard: source
// model-NNNNN-of-000096.safetensors, NNNNN in 1..94, becomes model-NNNNN-of-000094.safetensors;
// shards 95-96 (vision tower, mm_projector) and every vision_tower.* / mm_projector.* tensor are
// dropped. Within a file: the other tensors in source data order, then the routed experts
// ordered by (expert, w1|w2|w3, packed|scale) (a stable sort, the layer ignored, as upstream
// sorts), so each expert's six MXFP4 tensors are one run. Experts and float tensors are copied
// byte for byte; the bits / mla / head classes (targets/kimi_k3_contract.h) are quantized into
// <name> U8 + <name>.qs F32: int8 per row ([O, I], [O]) or, at 4 bits when I % 64 == 0, int4-g64
// ([O, I/2] offset-binary, low nibble = even column; [O, I/64]). Either way s = max(amax / qmax,
// 1e-20) in f32 and q = rint(x * (1 / s)) clamped to [-127, 127] or [-8, 7], kimi_k3.c's w_load.
// Header: the entries in file order, compact JSON, no __metadata__, padded with spaces to a
// multiple of 8. model.safetensors.index.json is regenerated (total_size = tensor bytes);
// config.json, generation_config.json, tokenizer.json and tokenizer_config.json are copied.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "qrepack/core/checked.h"
#include "targets/container/check_load_parts.h"
#include "targets/container/planners.h"
#include "targets/kimi_k3/kimi_k3_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kTarget = "colibri-kimi-k3 (kimi_k3.c)";
constexpr std::string_view kPrefix = "language_model.";
constexpr std::uint64_t kGroup = 64;
constexpr std::uint64_t kLastTextShard = 94;

bool is_vision(std::string_view n) {
  return n.starts_with("vision_tower") || n.starts_with("mm_projector");
}

// "model-NNNNN-of-000096.safetensors" -> NNNNN (1..96), the only names k3_repack.py opens.
std::optional<std::uint64_t> shard_number(const std::string& file) {
  constexpr std::string_view head = "model-", tail = "-of-000096.safetensors";
  if (file.size() != head.size() + 5 + tail.size() || !file.starts_with(head) ||
      !file.ends_with(tail)) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  for (char c : file.substr(head.size(), 5)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (n < 1 || n > 96) return std::nullopt;
  return n;
}

// k3_repack.py's bits map: --bits, --mla-bits, --head-bits (defaults max(bits, 8)).
struct ClassBits {
  int bits = 8, mla = 8, head = 8;
  int of(K3Class c) const { return c == K3Class::kMla ? mla : c == K3Class::kHead ? head : bits; }
};

Result<ClassBits> class_bits(const ContainerOptions& o) {
  if (o.expert_bits || o.down_bits || o.down_group || o.attn_bits ||
      (o.scheme != "int8-row" && o.scheme != "int4-g64")) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--target colibri-kimi-k3 copies the MXFP4 experts as stored and "
                             "quantizes the BF16 projections: --to int8-row (upstream --bits 8) "
                             "or int4-g64 (--bits 4), with --bits mla=4|8,head=4|8; not --to {}{}",
                             o.scheme,
                             o.expert_bits || o.down_bits ? " with --bits experts/down" : ""))
        .with_rule("target.scheme");
  }
  for (const int b : {o.mla_bits, o.head_bits}) {
    if (b != 0 && b != 4 && b != 8) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--bits mla/head={}: colibri-kimi-k3 writes 8 (int8 per row) or 4 "
                               "(int4-g64)",
                               b))
          .with_rule("target.scheme");
    }
  }
  ClassBits c;
  c.bits = o.scheme == "int4-g64" ? 4 : 8;
  c.mla = o.mla_bits ? o.mla_bits : std::max(c.bits, 8);
  c.head = o.head_bits ? o.head_bits : std::max(c.bits, 8);
  return c;
}

// The quantizer of w_load at `bits` for `cols` input columns.
QuantRule k3_rule(int bits, std::uint64_t cols) {
  QuantRule r;
  r.amax_floor = 0.0f;
  r.scale_floor = 1e-20f;
  r.reciprocal = true;
  if (bits <= 4 && cols % kGroup == 0) {
    r.bits = 4;
    r.group = kGroup;
    r.byte_rows = true;
  } else {
    r.bits = 8;
    r.symmetric = true;
  }
  return r;
}

class Planner {
 public:
  Planner(const Checkpoint& ck, ContainerPlan& plan, const K3Dims& d, ClassBits bits)
      : ck_(ck), plan_(plan), d_(d), bits_(bits), b_(plan) {}

  Status check() {
    const std::string probe = "model.layers.0.input_layernorm.weight";
    prefix_ = !ck_.find(probe) && ck_.find(std::string(kPrefix) + probe) ? kPrefix : "";
    for (std::size_t s = 0; s < ck_.shards().size(); ++s) check_shard(s);
    for_each_k3_tensor(d_, [&](const std::string& n, const K3Expect&) {
      if (!ck_.find(std::string(prefix_) + n))
        problems_.push_back(std::string(prefix_) + n + " (missing)");
    });
    if (problems_.empty()) return ok_status();
    std::sort(problems_.begin(), problems_.end());
    return unknown_tensors_error(ck_.directory(), kTarget, problems_);
  }

  void build() {
    std::map<std::uint64_t, std::size_t> order;  // shard number -> shard
    for (std::size_t s = 0; s < ck_.shards().size(); ++s) order[number_[s]] = s;
    plan_.recognized = std::make_shared<Recognized>();
    plan_.recognized->weights.reserve(ck_.tensors().size());  // units point into it
    for (const auto& [n, s] : order) {
      if (n <= kLastTextShard) build_file(n, s);
    }
    for (const TensorRef t : ck_.tensors()) {
      if (is_vision(t.entry->name) || number_[t.shard] > kLastTextShard) {
        b_.source(t.entry->name, "drop", "kimi_k3.vision_not_converted");
      }
    }
  }

 private:
  std::string file_name(std::size_t s) const {
    return fs::path(ck_.shards()[s].path()).filename().string();
  }

  void check_shard(std::size_t s) {
    const auto n = shard_number(file_name(s));
    number_.push_back(n.value_or(0));
    if (!n) {
      problems_.push_back(
          fmt::format("{} (a shard k3_repack.py never opens: it reads "
                      "model-NNNNN-of-000096.safetensors only)",
                      file_name(s)));
      return;
    }
    for (const TensorEntry& t : ck_.shards()[s].tensors()) {
      if (is_vision(t.name)) continue;
      if (*n > kLastTextShard) {
        problems_.push_back(fmt::format("{} (a text tensor in {}, a shard upstream drops whole)",
                                        t.name, file_name(s)));
        continue;
      }
      check_tensor(t);
    }
  }

  void check_tensor(const TensorEntry& t) {
    const std::string_view n = t.name;
    const auto e = n.starts_with(prefix_) ? k3_expect(n.substr(prefix_.size()), d_) : std::nullopt;
    if (!e) {
      problems_.emplace_back(n);
      return;
    }
    const std::string got =
        fmt::format("{} [{}]", dtype_info(t.dtype).safetensors, fmt::join(t.shape, ", "));
    if (e->cls == K3Class::kExpert) {
      if (t.dtype != Dtype::kU8 || t.shape.size() != 2 || t.shape[0] != e->rows ||
          t.shape[1] != e->cols) {
        problems_.push_back(
            fmt::format("{}: {}, MXFP4 needs U8 [{}, {}]", n, got, e->rows, e->cols));
      }
    } else if (e->cls != K3Class::kFloat) {
      if (!is_float(t.dtype) || t.shape.size() != 2 || t.shape[0] != e->rows ||
          t.shape[1] != e->cols) {
        problems_.push_back(
            fmt::format("{}: {}, the config implies a float [{}, {}]", n, got, e->rows, e->cols));
      }
    } else if (!is_float(t.dtype) || (e->at_least ? t.numel() < e->rows : t.numel() != e->rows)) {
      problems_.push_back(fmt::format("{}: {}, the loader reads {}{} float elements", n, got,
                                      e->at_least ? "at least " : "", e->rows));
    }
  }

  void build_file(std::uint64_t n, std::size_t s) {
    b_.file(fmt::format("model-{:05d}-of-000094.safetensors", n));
    std::vector<const TensorEntry*> rest, experts;
    for (const TensorEntry& t : ck_.shards()[s].tensors()) {  // in data order
      if (is_vision(t.name)) continue;
      (k3_expert_key(t.name.substr(prefix_.size())) ? experts : rest).push_back(&t);
    }
    std::stable_sort(experts.begin(), experts.end(), [&](const auto* a, const auto* c) {
      return *k3_expert_key(a->name.substr(prefix_.size())) <
             *k3_expert_key(c->name.substr(prefix_.size()));
    });
    rest.insert(rest.end(), experts.begin(), experts.end());
    for (const TensorEntry* t : rest) add(TensorRef{s, t});
  }

  void add(const TensorRef& t) {
    const std::string name(t.entry->name);
    const K3Expect e = *k3_expect(t.entry->name.substr(prefix_.size()), d_);
    if (e.cls == K3Class::kExpert || e.cls == K3Class::kFloat) {
      b_.copy(t, name);
      const bool expert = e.cls == K3Class::kExpert;
      b_.count(expert ? "routed experts MXFP4, copied" : "kept as stored");
      b_.source(name, "keep", expert ? "kimi_k3.expert_mxfp4" : "kimi_k3.as_stored");
      return;
    }
    LogicalWeight& w = plan_.recognized->weights.emplace_back();
    w.name = t.entry->name;
    w.shape = WeightShape(t.entry->shape);
    w.data = t;
    w.source_dtype = t.entry->dtype;
    const QuantRule r = k3_rule(bits_.of(e.cls), e.cols);
    const char* cls = e.cls == K3Class::kMla ? "mla" : e.cls == K3Class::kHead ? "head" : "bits";
    if (r.bits == 4) {
      b_.quant({{&w, r}}, name, Dtype::kU8, {e.rows, e.cols / 2}, name + ".qs",
               {e.rows, e.cols / kGroup});
    } else {
      b_.quant({{&w, r}}, name, Dtype::kU8, {e.rows, e.cols}, name + ".qs", {e.rows});
    }
    const char* how = r.bits == 4 ? "int4-g64" : "int8 per row";
    b_.count(fmt::format("class {} {}", cls, how));
    b_.source(name, "convert", fmt::format("kimi_k3.{}_{}", cls, r.bits == 4 ? "int4" : "int8"));
  }

  const Checkpoint& ck_;
  ContainerPlan& plan_;
  const K3Dims& d_;
  ClassBits bits_;
  ContainerBuilder b_;
  std::string_view prefix_;
  std::vector<std::uint64_t> number_;  ///< per shard: its NNNNN (0: not a release name)
  std::vector<std::string> problems_;
};

// model.safetensors.index.json as json.dump writes it: total_size = the tensor bytes.
std::string index_json(const ContainerPlan& plan) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  std::uint64_t total = 0;
  for (const ContainerFile& f : plan.files) {
    for (const TensorSpec& t : f.tensors) {
      map[t.name] = f.name;
      total += data_bytes(t.view());
    }
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(map);
  return python_json(index, -1);
}

}  // namespace

Result<ContainerPlan> plan_kimi_k3(const Checkpoint& ck, const ContainerOptions& o) {
  const std::string& dir = ck.directory();
  QR_ASSIGN_OR_RETURN(bits, class_bits(o));
  QR_ASSIGN_OR_RETURN(config, read_config(dir, "colibri-kimi-k3"));
  auto dims = read_k3_dims(nlohmann::json::parse(config.dump()));
  if (!dims.ok()) return std::move(dims.error().in_file((fs::path(dir) / "config.json").string()));
  ContainerPlan plan;
  plan.family = "kimi_k3";
  plan.model_type = json_string(config, "model_type", "kimi_k3");
  Planner p(ck, plan, *dims, bits);
  QR_TRY(p.check());
  p.build();
  if (!plan.files.empty()) {
    plan.side_files.push_back({"model.safetensors.index.json", index_json(plan), "", ""});
  }
  copy_side_files(plan, dir, {"config.json", "tokenizer.json", "tokenizer_config.json"});
  add_generation_config(plan, dir, config);
  plan.verify_copies = true;
  return plan;
}

}  // namespace qrepack
