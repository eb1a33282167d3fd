// `qrepack inspect PATH`: the tensors of a checkpoint (name, dtype, shape, bytes, shard), totals
// per dtype, and the recognised layout family. Reads headers only.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/format.h"
#include "cli/inspect_gguf.h"
#include "cli/release_cli.h"
#include "io/json_stream.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/layout_family.h"
#include "qrepack/checkpoint/logical_weights.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/gguf.h"
#include "qrepack/targets/target.h"

namespace qrepack::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  std::string filter;
};

struct ModelReport {
  std::string family;                            ///< family id, or "" when not known
  std::string line;                              ///< in words
  std::map<std::string, std::size_t> encodings;  ///< for --json
  std::string summary;                           ///< source_encodings_summary
  std::string encoding_error;
  const Target* target = nullptr;  ///< the container convert writes by default
  std::string target_line;
};

// The target convert writes by default for the checkpoint's model_type, in words.
void describe_target(const Checkpoint& ck, ModelReport& m) {
  auto type = read_model_type(ck.directory());
  if (!type.ok() || !*type) {
    m.target_line =
        "none chosen (no model_type; convert converts by name rules with "
        "--no-coverage-gate into the GLM-style container)";
    return;
  }
  m.target = default_target(**type);
  if (m.target) {
    m.target_line = fmt::format("{} (runtime {}): the container convert writes by default",
                                m.target->name, m.target->runtime);
    if (m.target->id != TargetId::kColibriGlm && !m.family.empty()) return;
    if (m.target->id != TargetId::kColibriGlm) {  // its own contract, not the family table
      m.line = fmt::format("model_type {}, converted by target {}'s contract (docs/targets.md)",
                           (**type).substr(0, 64), m.target->name);
    }
    return;
  }
  m.target_line = family_for_model_type(**type)
                      ? "none: no engine runtime loads this family (convert refuses it unless "
                        "--target generic asks for the GLM-style container)"
                      : "none: an unknown model_type";
}

// A family the engine runs as downloaded: named, with no conversion to offer (Qwen3.8 keeps
// its optional overlay target).
void describe_release(const Checkpoint& ck, ModelReport& m) {
  auto type = read_model_type(ck.directory());
  if (!type.ok() || !*type) return;
  const auto line = release_model_line(**type);
  if (!line) return;
  m.line = *line;
  if (!m.target) {
    m.target_line = "none needed: 'qrepack check-load DIR' checks it as its runtime loads it";
  }
}

// The family (from config.json) and the source encodings (from names, dtypes and shapes);
// inspect reports problems here instead of failing, as convert would refuse them.
ModelReport model_report(const Checkpoint& ck) {
  ModelReport m;
  auto cfg = load_moe_config(ck.directory());
  const MoeConfig* c = nullptr;
  if (!cfg.ok()) {
    m.line = cfg.error().message();
  } else if (!*cfg) {
    m.line = "no config.json (convert needs --no-coverage-gate)";
  } else {
    c = &**cfg;
    const Family& f = family(c->family);
    m.family = std::string(f.name);
    m.line = fmt::format("{} ({}), model_type {}, {} layers of which {} MoE, {} routed experts",
                         f.name, f.title, c->model_type, c->num_hidden_layers, moe_layer_count(*c),
                         c->n_routed_experts);
  }
  describe_target(ck, m);
  describe_release(ck, m);
  auto rec = recognize_weights(ck, c, RecognizeWeights::kCount);
  if (!rec.ok()) {
    m.encoding_error = rec.error().message();
    return m;
  }
  m.encodings = rec->encoding_counts;
  m.summary = source_encodings_summary(*rec);
  if (rec->name_map == NameMap::kMiniMax) m.line += "; names mapped as MiniMax";
  return m;
}

std::string encodings_text(const ModelReport& m) {
  return m.encoding_error.empty() ? m.summary : "not recognised: " + m.encoding_error;
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Status run_inspect(const InspectOptions& o) {
  std::optional<NamePattern> filter;
  if (!o.filter.empty()) {
    QR_ASSIGN_OR_RETURN(re, NamePattern::compile(o.filter, "--filter"));
    filter = std::move(re);
  }
  if (is_gguf_source(o.path)) return run_inspect_gguf(o.path, o.json, filter);
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(o.path));
  const LayoutReport layout = recognize_layout(ck);
  const ModelReport model = model_report(ck);
  for (const std::string& w : ck.warnings()) fmt::print(stderr, "warning: {}\n", w);

  struct Totals {
    std::size_t count = 0;
    std::uint64_t bytes = 0;
  };
  std::map<std::string, Totals> totals;
  const CheckpointTensors all = ck.tensors();
  std::vector<std::uint32_t> shown;  // positions in all (Checkpoint caps tensors at 2^32)
  std::uint64_t shown_bytes = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const TensorRef t = all[i];
    if (filter && !filter->search(t.entry->name)) continue;
    shown.push_back(static_cast<std::uint32_t>(i));
    auto& tot = totals[std::string(dtype_info(t.entry->dtype).safetensors)];
    ++tot.count;
    tot.bytes += t.entry->byte_size();
    shown_bytes += t.entry->byte_size();
  }
  auto shard_name = [&](const TensorRef& t) {
    return std::filesystem::path(ck.shards()[t.shard].path()).filename().string();
  };

  if (o.json) {
    // Streamed tensor by tensor (a DOM of 117k tensors took about 200 MiB); the bytes are
    // those of the whole document dumped with an indent of 2.
    using nlohmann::json;
    using nlohmann::ordered_json;
    StdioSink out(stdout, "<stdout>");
    JsonObjectStream js(out, 2);
    QR_TRY(js.member("path", json(o.path)));
    json shards = json::array();
    for (const auto& s : ck.shards()) {
      shards.push_back(std::filesystem::path(s.path()).filename().string());
    }
    QR_TRY(js.member("shards", shards));
    QR_TRY(js.begin_array("tensors"));
    for (const std::uint32_t i : shown) {
      const TensorRef t = all[i];
      QR_TRY(js.item(ordered_json{{"name", t.entry->name},
                                  {"dtype", dtype_info(t.entry->dtype).safetensors},
                                  {"shape", t.entry->shape},
                                  {"bytes", t.entry->byte_size()},
                                  {"shard", shard_name(t)}}));
    }
    QR_TRY(js.end());
    ordered_json by_dtype = ordered_json::object();
    for (const auto& [d, tot] : totals)
      by_dtype[d] = {{"tensors", tot.count}, {"bytes", tot.bytes}};
    QR_TRY(js.member("totals", by_dtype));
    QR_TRY(js.member("total_tensors", json(shown.size())));
    QR_TRY(js.member("total_bytes", json(shown_bytes)));
    ordered_json l;
    l["family"] = layout.id;
    l["description"] = layout.description;
    if (layout.block) l["block"] = {layout.block->rows, layout.block->cols};
    l["fp8_tensors"] = layout.fp8_tensors;
    l["scale_sidecars"] = layout.scale_sidecars;
    l["other_tensors"] = layout.other_tensors;
    l["notes"] = layout.notes;
    QR_TRY(js.member("layout", l));
    ordered_json m = {{"family", model.family.empty() ? json() : json(model.family)},
                      {"description", model.line},
                      {"encodings", model.encodings},
                      {"target", model.target ? ordered_json{{"name", model.target->name},
                                                             {"runtime", model.target->runtime}}
                                              : ordered_json()}};
    if (!model.encoding_error.empty()) m["encoding_error"] = model.encoding_error;
    QR_TRY(js.member("model", m));
    QR_TRY(js.finish());
    return out.commit();
  }

  // One row per tensor (117k for GLM-5.2), produced on demand rather than held.
  print_table(stdout, {"NAME", "DTYPE", "SHAPE", "BYTES", "SHARD"},
              {false, false, false, true, false}, shown.size(), [&](std::size_t i) {
                const TensorRef t = all[shown[i]];
                return std::vector<std::string>{
                    std::string(t.entry->name), std::string(dtype_info(t.entry->dtype).safetensors),
                    shape_text(t.entry->shape), fmt::format("{}", t.entry->byte_size()),
                    shard_name(t)};
              });
  fmt::print("\n");
  Table per_dtype({"DTYPE", "TENSORS", "BYTES", ""}, {false, true, true, false});
  for (const auto& [d, tot] : totals) {
    per_dtype.add(
        {d, fmt::format("{}", tot.count), fmt::format("{}", tot.bytes), human_bytes(tot.bytes)});
  }
  per_dtype.add({"total", fmt::format("{}", shown.size()), fmt::format("{}", shown_bytes),
                 human_bytes(shown_bytes)});
  per_dtype.print(stdout);
  fmt::print("\n{} tensors in {} shard(s){}\n", ck.tensors().size(), ck.shards().size(),
             filter ? fmt::format(", {} shown by --filter", shown.size()) : "");
  // recognize_layout knows plain and FP8-block checkpoints; the encodings recognizer knows
  // every source encoding, so it speaks for the checkpoints the former calls unknown.
  const bool recognized = model.encoding_error.empty() && !model.encodings.empty();
  if (layout.family == LayoutFamily::kUnknown && recognized) {
    fmt::print("layout: {}\n", encodings_text(model));
  } else {
    fmt::print("layout: {}\n", layout.description);
    if (layout.fp8_tensors > 0 || layout.family == LayoutFamily::kFp8Block) {
      fmt::print("FP8 tensors: {}, scale sidecars: {}, other tensors: {}\n", layout.fp8_tensors,
                 layout.scale_sidecars, layout.other_tensors);
    }
    for (const std::string& n : layout.notes) fmt::print("note: {}\n", n);
  }
  fmt::print("model: {}\n", model.line);
  fmt::print("target: {}\n", model.target_line);
  fmt::print("source encodings: {}\n", encodings_text(model));
  return ok_status();
}

}  // namespace

Action add_inspect(CLI::App& sub) {
  auto o = std::make_shared<InspectOptions>();
  sub.add_option("PATH", o->path,
                 "A .safetensors file, an index .json, a checkpoint directory, hf://ORG/REPO[@REV] "
                 "or an https:// URL (headers only)")
      ->required();
  sub.add_flag("--json", o->json, "Print the same information as JSON on stdout");
  sub.add_option("--filter", o->filter, "Only list tensors whose name matches this regex");
  return [o] { return run_inspect(*o); };
}

}  // namespace qrepack::cli
