// colibri-gemma4's plan (targets/gemma4/gemma4_pack.h): the GGUF's metadata and tensor table
// checked, then every byte of the packed directory described: per layer a header and one job
// per expert copying its gate, up and down slices; manifest.json's text; qrepack.json's head.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "core/version.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/ggml_quants.h"
#include "targets/container/planners.h"
#include "targets/gemma4/gemma4_pack.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

Error metadata_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("gemma4.metadata");
}

// A count key: an integer of any width in 1..`max` (the engine refuses values over uint32).
Result<std::uint64_t> count_key(const GgufHeader& h, const std::string& key, std::uint64_t max) {
  const GgufValue* v = h.find(key);
  if (!v) return metadata_error(fmt::format("metadata has no {}", key));
  if (!v->is_integer() || (v->is_signed() && v->as_i64() <= 0) || v->u == 0 || v->u > max) {
    return metadata_error(fmt::format("{} must be an integer in 1..{}", key, max));
  }
  return v->u;
}

std::string type_name(std::uint32_t type) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  return info ? std::string(info->name) : fmt::format("type {}", type);
}

std::string dims_text(const std::vector<std::uint64_t>& dims) {
  return fmt::format("({})", fmt::join(dims, ", "));
}

// Tensor `name` of ggml type `type` and dims `want`, or an error naming it and the rule.
Result<const GgufTensor*> expect(const GgufHeader& h, const std::string& name, std::uint32_t type,
                                 const std::vector<std::uint64_t>& want, std::string_view why) {
  const GgufTensor* t = h.tensor(name);
  if (!t) {
    return Error(ErrorKind::kMissingTensors, fmt::format("the GGUF has no {}{}", name, why))
        .in_tensor(name)
        .with_rule("gemma4.missing_tensor");
  }
  if (t->ggml_type != type) {
    return Error(ErrorKind::kUnloadableLayout,
                 fmt::format("{} is {}; {}", name, type_name(t->ggml_type),
                             type == kGgmlQ4_0
                                 ? "colibri's Gemma 4 loader reads packed experts as Q4_0 only "
                                   "(gemma4_backend.c: \"Gemma packed experts must use Q4_0\")"
                                 : "the loader reads the per-expert scale as F32"))
        .in_tensor(name)
        .with_rule(type == kGgmlQ4_0 ? "gemma4.expert_type" : "gemma4.scale_type");
  }
  if (t->dims != want) {
    return Error(ErrorKind::kUnexpectedShape,
                 fmt::format("{} has dims {}, the metadata implies {} (ggml order)", name,
                             dims_text(t->dims), dims_text(want)))
        .in_tensor(name)
        .with_rule("gemma4.shape");
  }
  return t;
}

nlohmann::ordered_json component(const char* role, const std::string& tensor, std::uint64_t bytes,
                                 std::uint64_t at, std::uint64_t stride, std::uint64_t within) {
  return {{"role", role},
          {"tensor", tensor},
          {"ggml_type", kGgmlQ4_0},
          {"type_name", "Q4_0"},
          {"slice_bytes", bytes},
          {"source_offset", at},
          {"source_expert_stride", stride},
          {"source_within_expert_offset", within}};
}

// manifest.json as make_gemma4_tiny.py writes it: json.dumps(indent=2), its key order, no
// trailing newline; expert_scale always an object (with the tensor's name, which the loader
// ignores like the components' "tensor").
std::string manifest_text(const Gemma4Pack& p) {
  const Gemma4Dims& d = p.dims;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (std::uint64_t n = 0; n < p.layers.size(); ++n) {
    const Gemma4Layer& l = p.layers[n];
    const std::string gate_up = fmt::format("blk.{}.ffn_gate_up_exps.weight", n);
    const std::string down = fmt::format("blk.{}.ffn_down_exps.weight", n);
    nlohmann::ordered_json components = nlohmann::ordered_json::array();
    components.push_back(
        component("gate", gate_up, l.gate_bytes, l.gate_up_at, l.gate_up_stride, 0));
    components.push_back(
        component("up", gate_up, l.gate_bytes, l.gate_up_at, l.gate_up_stride, l.gate_bytes));
    components.push_back(component("down", down, l.down_bytes, l.down_at, l.down_stride, 0));
    layers.push_back({{"layer", n},
                      {"expert_count", d.experts},
                      {"model_width", d.width},
                      {"expert_width", d.expert_width},
                      {"source_layout", "fused_gate_up"},
                      {"packed_file", gemma4_file_name(n)},
                      {"payload_bytes", l.payload},
                      {"record_stride", l.stride},
                      {"expert_scale",
                       {{"tensor", fmt::format("blk.{}.ffn_down_exps.scale", n)},
                        {"ggml_type", kGgmlF32},
                        {"source_offset", l.scale_at},
                        {"scalar_bytes", 4}}},
                      {"components", std::move(components)}});
  }
  const nlohmann::ordered_json m = {{"format", "g4lab-expert-manifest-v2"},
                                    {"architecture", "gemma4"},
                                    {"source", p.source},
                                    {"expert_count", d.experts},
                                    {"expert_used_count", d.used},
                                    {"layers", std::move(layers)}};
  return python_json(m, 2);
}

// One layer file: its header, then one job per expert copying gate, up and down.
ByteFile layer_file(std::uint64_t n, const Gemma4Dims& d, const Gemma4Layer& l) {
  ByteFile f{gemma4_file_name(n), l.file_size, {}};
  f.jobs.reserve(d.experts + 1);
  BytePiece header;
  header.literal = gemma4_header(n, d, l);
  header.size = header.literal.size();
  f.jobs.push_back({{std::move(header)}});
  for (std::uint64_t e = 0; e < d.experts; ++e) {
    const std::uint64_t at = kGemma4HeaderBytes + e * l.stride;
    const std::uint64_t from = l.gate_up_at + e * l.gate_up_stride;
    ByteJob j;
    j.pieces.push_back({at, l.gate_bytes, {}, 0, from});
    j.pieces.push_back({at + l.gate_bytes, l.gate_bytes, {}, 0, from + l.gate_bytes});
    j.pieces.push_back({at + 2 * l.gate_bytes, l.down_bytes, {}, 0, l.down_at + e * l.down_stride});
    f.jobs.push_back(std::move(j));
  }
  return f;
}

void put_le(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace

std::string gemma4_file_name(std::uint64_t layer) {
  return fmt::format("layer-{:02d}.g4ex", layer);
}

std::vector<std::uint8_t> gemma4_header(std::uint64_t layer, const Gemma4Dims& d,
                                        const Gemma4Layer& l) {
  std::vector<std::uint8_t> b(kGemma4HeaderBytes, 0);
  const std::string_view magic = "G4EXPK01";
  std::copy(magic.begin(), magic.end(), b.begin());
  put_le(b, 8, 1, 4);  // version
  put_le(b, 12, layer, 4);
  put_le(b, 16, d.experts, 4);
  put_le(b, 20, kGgmlQ4_0, 4);
  put_le(b, 24, kGemma4HeaderBytes, 4);
  put_le(b, 32, kGemma4HeaderBytes, 8);
  put_le(b, 40, l.payload, 8);
  put_le(b, 48, l.stride, 8);
  put_le(b, 56, l.gate_bytes, 8);
  put_le(b, 64, l.gate_bytes, 8);
  put_le(b, 72, l.down_bytes, 8);
  return b;
}

Result<Gemma4Dims> gemma4_dims(const GgufHeader& h) {
  const GgufValue* arch = h.find("general.architecture");
  if (!arch || arch->type != GgufType::kString || arch->s != "gemma4") {
    const std::string shown = !arch ? "missing"
                              : arch->type != GgufType::kString
                                  ? std::string(gguf_type_name(arch->type))
                                  : fmt::format("\"{}\"", arch->s.substr(0, 64));
    return Error(ErrorKind::kUnsupportedModel,
                 fmt::format("general.architecture is {}, not \"gemma4\" (colibri-gemma4 packs "
                             "the experts of Gemma 4 GGUFs only)",
                             shown))
        .with_rule("gemma4.architecture");
  }
  Gemma4Dims d;
  QR_ASSIGN_OR_RETURN(layers, count_key(h, "gemma4.block_count", kGemma4MaxLayers));
  QR_ASSIGN_OR_RETURN(width, count_key(h, "gemma4.embedding_length", kMaxDim));
  QR_ASSIGN_OR_RETURN(experts, count_key(h, "gemma4.expert_count", kGemma4MaxExperts));
  QR_ASSIGN_OR_RETURN(used, count_key(h, "gemma4.expert_used_count", kGemma4MaxExperts));
  QR_ASSIGN_OR_RETURN(ff, count_key(h, "gemma4.expert_feed_forward_length", kMaxDim));
  d = {layers, width, ff, experts, used};
  if (used > experts) {
    return metadata_error(
        fmt::format("gemma4.expert_used_count {} exceeds gemma4.expert_count {}", used, experts));
  }
  if (width % 32 != 0 || ff % 32 != 0) {
    return metadata_error(
        fmt::format("gemma4.embedding_length {} and "
                    "gemma4.expert_feed_forward_length {} must be multiples of "
                    "32 (Q4_0 rows; the loader refuses others)",
                    width, ff));
  }
  return d;
}

Result<Gemma4Layer> gemma4_layer(const GgufHeader& h, const Gemma4Dims& d, std::uint64_t n) {
  const std::string gate_up = fmt::format("blk.{}.ffn_gate_up_exps.weight", n);
  const std::string fused_why =
      h.tensor(fmt::format("blk.{}.ffn_gate_exps.weight", n))
          ? " (it has separate ffn_gate_exps / ffn_up_exps; the loader reads fused_gate_up only)"
          : "";
  QR_ASSIGN_OR_RETURN(
      gu, expect(h, gate_up, kGgmlQ4_0, {d.width, 2 * d.expert_width, d.experts}, fused_why));
  QR_ASSIGN_OR_RETURN(dn, expect(h, fmt::format("blk.{}.ffn_down_exps.weight", n), kGgmlQ4_0,
                                 {d.expert_width, d.width, d.experts}, ""));
  QR_ASSIGN_OR_RETURN(sc, expect(h, fmt::format("blk.{}.ffn_down_exps.scale", n), kGgmlF32,
                                 {d.experts}, " (the per-expert output scale)"));
  Gemma4Layer l;
  l.experts = d.experts;
  // W, F <= 2^24 and E <= 4096 (gemma4_dims): no product below overflows 64 bits; the GGUF
  // reader checked each tensor's bytes lie in the file.
  l.gate_bytes = d.expert_width * (d.width / 32) * kGemma4Q4_0BlockBytes;
  l.down_bytes = d.width * (d.expert_width / 32) * kGemma4Q4_0BlockBytes;
  l.payload = 2 * l.gate_bytes + l.down_bytes;
  l.stride = ceil_div(l.payload, kGemma4HeaderBytes) * kGemma4HeaderBytes;
  l.file_size = kGemma4HeaderBytes + d.experts * l.stride;
  l.gate_up_at = gu->file_offset;
  l.gate_up_stride = 2 * l.gate_bytes;
  l.down_at = dn->file_offset;
  l.down_stride = l.down_bytes;
  l.scale_at = sc->file_offset;
  if (gu->bytes != l.gate_up_stride * d.experts || dn->bytes != l.down_stride * d.experts ||
      gu->part != 0 || dn->part != 0 || sc->part != 0) {
    return Error(ErrorKind::kInternal, "tensor bytes disagree with their Q4_0 dims")
        .in_tensor(gate_up)
        .with_rule("gemma4.shape");
  }
  return l;
}

Result<Gemma4Pack> plan_gemma4_pack(const GgufFile& f) {
  auto in_file = [&](Error e) { return std::move(e.in_file(f.path())); };
  if (f.paths().size() > 1) {
    return in_file(Error(ErrorKind::kUnsupportedModel,
                         fmt::format("a split GGUF ({} parts) cannot be packed: manifest.json has "
                                     "one source path and absolute offsets into that one file; "
                                     "merge the parts first (llama-gguf-split --merge)",
                                     f.paths().size()))
                       .with_rule("gemma4.split_gguf"));
  }
  const GgufHeader& h = f.header();
  Gemma4Pack p;
  auto dims = gemma4_dims(h);
  if (!dims.ok()) return in_file(std::move(dims).error());
  p.dims = *dims;
  std::error_code ec;
  p.source = fs::absolute(f.path(), ec).lexically_normal().string();
  const auto bad =
      first_invalid_utf8({reinterpret_cast<const std::uint8_t*>(p.source.data()), p.source.size()});
  if (ec || bad || p.source.size() > kGemma4MaxSourcePath) {
    return in_file(Error(ErrorKind::kInvalidArgument,
                         fmt::format("the GGUF's absolute path must be valid UTF-8 (JSON) and at "
                                     "most {} bytes (the loader's source buffer)",
                                     kGemma4MaxSourcePath))
                       .with_rule("gemma4.source_path"));
  }
  for (std::uint64_t n = 0; n < p.dims.layers; ++n) {
    auto l = gemma4_layer(h, p.dims, n);
    if (!l.ok()) return in_file(std::move(l).error());
    p.layers.push_back(*l);
  }
  ByteRunPlan& run = p.run;
  for (std::uint64_t n = 0; n < p.layers.size(); ++n) {
    run.files.push_back(layer_file(n, p.dims, p.layers[n]));
  }
  run.side_files.emplace_back("manifest.json", manifest_text(p));
  for (const GgufTensor& t : h.tensors) {
    const bool expert =
        t.name.ends_with(".ffn_gate_up_exps.weight") || t.name.ends_with(".ffn_down_exps.weight");
    const bool scale = t.name.ends_with(".ffn_down_exps.scale");
    run.sources.push_back({t.name, expert ? "merge" : "keep",
                           expert  ? "gemma4.expert_records"
                           : scale ? "gemma4.expert_scale_in_gguf"
                                   : "gemma4.read_from_gguf"});
  }
  run.parameters = gguf_run_parameters("colibri-gemma4", "as-stored");
  run.manifest["qrepack_version"] = kVersion;
  run.manifest["target"] = {{"name", "colibri-gemma4"},
                            {"runtime", "c/gemma4.c"},
                            {"reference_tool", "none: g4lab's packer is not published"}};
  run.manifest["parameters"] = run.parameters;
  run.manifest["source"] = {{"path", p.source},
                            {"format", "gguf"},
                            {"tensors", h.tensors.size()},
                            {"bytes", h.file_size},
                            {"model_type", "gemma4"}};
  return p;
}

}  // namespace qrepack
