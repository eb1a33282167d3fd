// check-load of colibri-gemma4 (targets/gemma4/gemma4_pack.h). First what
// gemma4_backend.c checks, in its order and with its messages: coli_gemma4_open_packed's
// reading of manifest.json (numbers as exact non-negative integers up to 2^53 - 1, u32 fields,
// roles, Q4_0, sizes, strides, records, safe names, layers 0..n-1, one W and F) and
// g4_read_header_and_payload's header fields and record bounds. Then what it never checks:
// a strict JSON parse (no duplicate keys), the manifest against the GGUF's metadata and tensor
// table (layer count, W, E, k, F, every offset and stride, the scale's offset), the exact
// file size, zero header bytes past 80 and zero padding, and every record byte-equal to the
// GGUF's slices.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/core/checked.h"
#include "qrepack/core/raw_vector.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/parallel/parallel_for.h"
#include "targets/gemma4/gemma4_pack.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::size_t kMaxListed = 48;  // problems listed; the rest counted
constexpr const char* kRoles[3] = {"gate", "up", "down"};

struct Component {
  std::uint64_t bytes = 0, at = 0, stride = 0, within = 0;
};

// One layer object as the loader reads it.
struct ManifestLayer {
  std::uint64_t layer = 0, experts = 0, width = 0, expert_width = 0, payload = 0, stride = 0;
  std::string file;
  bool has_scale = false;
  std::uint64_t scale_at = 0;
  Component parts[3];
};

struct Manifest {
  std::uint64_t experts = 0, used = 0;
  std::string source;
  std::vector<ManifestLayer> layers;  // index = layer number once checked
};

// g4_number_u64 / g4_number_u32: a JSON number that is finite, >= 0, integral and at most
// 2^53 - 1 (the loader holds numbers as doubles), at most 2^32 - 1 for a u32 field; the
// loader's message, or nullopt with `out` set.
std::optional<std::string> number(const Json& o, const char* key, bool u32, std::uint64_t& out) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number()) {
    return fmt::format("manifest field {} is missing or not numeric", key);
  }
  constexpr std::uint64_t kMaxExact = (std::uint64_t{1} << 53) - 1;
  bool exact = false;
  if (it->is_number_unsigned()) {
    out = it->get<std::uint64_t>();
    exact = out <= kMaxExact;
  } else if (it->is_number_float()) {
    const double v = it->get<double>();
    exact =
        std::isfinite(v) && v >= 0.0 && v <= static_cast<double>(kMaxExact) && std::floor(v) == v;
    if (exact) out = static_cast<std::uint64_t>(v);
  }  // else a negative integer
  if (!exact) return fmt::format("manifest field {} is not an exact non-negative integer", key);
  if (u32 && out > 0xFFFFFFFFull) return fmt::format("manifest field {} exceeds uint32", key);
  return std::nullopt;
}

const std::string* string_of(const Json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

// g4_parse_component.
std::optional<std::string> parse_component(const Json& c, ManifestLayer& l, bool seen[3]) {
  if (!c.is_object()) return fmt::format("layer {} has a component that is not an object", l.layer);
  const std::string* role = string_of(c, "role");
  const std::string* type_name = string_of(c, "type_name");
  std::uint64_t type = 0;
  Component p;
  if (!role || !type_name) return "manifest field role or type_name is missing";
  if (auto e = number(c, "ggml_type", true, type)) return e;
  if (auto e = number(c, "slice_bytes", false, p.bytes)) return e;
  if (auto e = number(c, "source_offset", false, p.at)) return e;
  if (auto e = number(c, "source_expert_stride", false, p.stride)) return e;
  if (auto e = number(c, "source_within_expert_offset", false, p.within)) return e;
  const int r = *role == "gate" ? 0 : *role == "up" ? 1 : *role == "down" ? 2 : -1;
  if (r < 0) return fmt::format("unsupported expert component role: {}", *role);
  if (type != kGgmlQ4_0 || *type_name != "Q4_0") return "Gemma packed experts must use Q4_0";
  // The loader marks a role seen by its nonzero slice_bytes.
  if (seen[r]) return fmt::format("duplicate {} component in layer {}", *role, l.layer);
  seen[r] = p.bytes != 0;
  l.parts[r] = p;
  return std::nullopt;
}

// g4_validate_layer.
std::optional<std::string> validate_layer(const ManifestLayer& l) {
  if (!l.experts || !l.width || !l.expert_width || l.width % 32 || l.expert_width % 32) {
    return fmt::format("layer {} has invalid expert dimensions", l.layer);
  }
  const std::uint64_t gate = l.expert_width * (l.width / 32) * 18;
  const std::uint64_t down = l.width * (l.expert_width / 32) * 18;
  const std::uint64_t want[3] = {gate, gate, down};
  for (int r = 0; r < 3; ++r) {
    if (l.parts[r].bytes != want[r]) {
      return fmt::format("layer {} Q4_0 component sizes do not match {} -> {} -> {}", l.layer,
                         l.width, l.expert_width, l.width);
    }
  }
  for (const Component& p : l.parts) {
    if (p.within > UINT64_MAX - p.bytes || p.stride < p.within + p.bytes) {
      return fmt::format("layer {} has invalid GGUF component strides", l.layer);
    }
  }
  if (2 * gate + down != l.payload || l.stride < l.payload || l.stride % 4096 != 0) {
    return fmt::format("layer {} has inconsistent payload/record sizes", l.layer);
  }
  if (l.file.empty() || l.file.find("..") != std::string::npos ||
      l.file.find_first_of("/\\:") != std::string::npos) {
    return fmt::format("layer {} has an unsafe packed filename", l.layer);
  }
  return std::nullopt;
}

// g4_parse_layer, then the expert count against the top level.
std::optional<std::string> parse_layer(const Json& v, const Manifest& m, ManifestLayer& l) {
  if (!v.is_object()) return "a manifest layers entry is not an object";
  if (auto e = number(v, "layer", true, l.layer)) return e;
  if (auto e = number(v, "expert_count", true, l.experts)) return e;
  if (auto e = number(v, "model_width", true, l.width)) return e;
  if (auto e = number(v, "expert_width", true, l.expert_width)) return e;
  if (auto e = number(v, "payload_bytes", false, l.payload)) return e;
  if (auto e = number(v, "record_stride", false, l.stride)) return e;
  const std::string* layout = string_of(v, "source_layout");
  if (!layout || *layout != "fused_gate_up") {
    return fmt::format("layer {} is not fused_gate_up", l.layer);
  }
  const std::string* file = string_of(v, "packed_file");
  if (!file) return "manifest field packed_file is missing";
  if (file->size() > kGemma4MaxPackedName) return "manifest field packed_file is too long";
  // The loader copies it as a C string: an embedded NUL ends it.
  l.file = file->substr(0, file->find('\0'));
  const auto scale = v.find("expert_scale");
  if (scale != v.end() && scale->is_object()) {
    std::uint64_t type = 0, scalar = 0;
    if (auto e = number(*scale, "ggml_type", true, type)) return e;
    if (auto e = number(*scale, "source_offset", false, l.scale_at)) return e;
    if (auto e = number(*scale, "scalar_bytes", true, scalar)) return e;
    if (type != kGgmlF32 || scalar != 4) {
      return fmt::format("layer {} expert scale must be F32", l.layer);
    }
    l.has_scale = true;
  } else if (scale != v.end() && !scale->is_null()) {
    return fmt::format("layer {} expert_scale is malformed", l.layer);
  }
  const auto comps = v.find("components");
  if (comps == v.end() || !comps->is_array() || comps->size() != 3) {
    return fmt::format("layer {} must contain gate, up, and down components", l.layer);
  }
  bool seen[3] = {false, false, false};
  for (const Json& c : *comps) {
    if (auto e = parse_component(c, l, seen)) return e;
  }
  if (auto e = validate_layer(l)) return e;
  if (l.experts != m.experts) {
    return fmt::format("layer {} expert count disagrees with manifest", l.layer);
  }
  return std::nullopt;
}

// coli_gemma4_open_packed: the manifest as the loader reads it; the first refusal it would
// give, or nullopt with `m` filled and m.layers indexed by layer number.
std::optional<std::string> read_manifest(const Json& root, Manifest& m) {
  if (!root.is_object()) return "manifest root is not a JSON object";
  const std::string* format = string_of(root, "format");
  if (!format || *format != "g4lab-expert-manifest-v2") return "unsupported packed manifest format";
  const std::string* arch = string_of(root, "architecture");
  if (!arch || *arch != "gemma4") return "packed manifest architecture is not gemma4";
  if (auto e = number(root, "expert_count", true, m.experts)) return e;
  if (auto e = number(root, "expert_used_count", true, m.used)) return e;
  if (!m.experts || !m.used || m.used > m.experts) return "invalid expert count in manifest";
  const std::string* source = string_of(root, "source");
  if (!source) return "manifest field source is missing";
  if (source->size() > kGemma4MaxSourcePath) return "manifest field source is too long";
  m.source = source->substr(0, source->find('\0'));
  const auto layers = root.find("layers");
  if (layers == root.end() || !layers->is_array() || layers->empty() ||
      layers->size() > kGemma4MaxManifestLayers) {
    return "manifest layers array is missing or invalid";
  }
  std::vector<ManifestLayer> parsed(layers->size());
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (auto e = parse_layer((*layers)[i], m, parsed[i])) return e;
  }
  std::map<std::uint64_t, std::size_t> by_number;
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (!by_number.emplace(parsed[i].layer, i).second) {
      return fmt::format("manifest contains duplicate layer {}", parsed[i].layer);
    }
  }
  for (std::uint64_t n = 0; n < parsed.size(); ++n) {
    if (!by_number.contains(n)) return fmt::format("manifest is missing routed layer {}", n);
    m.layers.push_back(parsed[by_number[n]]);
    if (m.layers.back().width != m.layers[0].width ||
        m.layers.back().expert_width != m.layers[0].expert_width) {
      return "Gemma expert dimensions vary across layers";
    }
  }
  return std::nullopt;
}

std::uint64_t le(const std::uint8_t* b, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | b[i];
  return v;
}

// g4_read_header_and_payload's header check, then beyond it: the exact size and zero bytes the
// loader never reads. Problems are added to `out`.
void check_header(const ManifestLayer& l, const std::uint8_t* h, std::uint64_t size,
                  std::vector<std::string>& out) {
  const auto bad = [&](std::string what) { out.push_back(l.file + ": " + std::move(what)); };
  struct Field {
    const char* name;
    std::size_t at;
    int bytes;
    std::uint64_t want;
  };
  const Field fields[] = {{"version", 8, 4, 1},
                          {"layer", 12, 4, l.layer},
                          {"expert count", 16, 4, l.experts},
                          {"ggml type", 20, 4, kGgmlQ4_0},
                          {"alignment", 24, 4, 4096},
                          {"header bytes", 32, 8, kGemma4HeaderBytes},
                          {"payload bytes", 40, 8, l.payload},
                          {"record stride", 48, 8, l.stride},
                          {"gate bytes", 56, 8, l.parts[0].bytes},
                          {"up bytes", 64, 8, l.parts[1].bytes},
                          {"down bytes", 72, 8, l.parts[2].bytes}};
  if (std::memcmp(h, "G4EXPK01", 8) != 0) return bad("packed layer header is missing or corrupt");
  for (const Field& f : fields) {
    if (le(h + f.at, f.bytes) != f.want) {
      bad(fmt::format("packed layer header disagrees with manifest: {} is {}, the manifest says {}",
                      f.name, le(h + f.at, f.bytes), f.want));
    }
  }
  // The manifest's numbers are at most 2^53 and 2^32: a product may overflow.
  const auto records = checked_mul(l.experts - 1, l.stride);
  const auto all = checked_mul(l.experts, l.stride);
  const std::uint64_t last =
      records ? checked_add(*records, kGemma4HeaderBytes + l.payload).value_or(UINT64_MAX)
              : UINT64_MAX;
  const std::uint64_t exact =
      all ? checked_add(*all, kGemma4HeaderBytes).value_or(UINT64_MAX) : UINT64_MAX;
  if (size < last) {
    bad(fmt::format("packed expert record is truncated: {} bytes, expert {} ends at {}", size,
                    l.experts - 1, last));
  } else if (size != exact) {
    bad(
        fmt::format("{} bytes, not 4096 + E x stride = {} (beyond the loader: qrepack writes the "
                    "last record's padding too)",
                    size, exact));
  }
  for (std::size_t i = 28; i < kGemma4HeaderBytes; ++i) {
    if (i == 32) i = 80;
    if (h[i] != 0) {
      return bad(
          fmt::format("header byte {} is {:#04x}, not 0 (beyond the loader: the bytes it "
                      "does not read are zero)",
                      i, h[i]));
    }
  }
}

// The manifest against the GGUF's metadata and tensor table; problems added to `out`.
void check_against_gguf(const Manifest& m, const GgufHeader& h, std::vector<std::string>& out,
                        std::vector<bool>& layout_ok) {
  auto dims = gemma4_dims(h);
  if (!dims.ok()) return out.push_back("the GGUF: " + dims.error().to_string());
  const Gemma4Dims& d = *dims;
  const ManifestLayer& l0 = m.layers[0];
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> agree[] = {
      {"layer count / gemma4.block_count", {m.layers.size(), d.layers}},
      {"model_width / gemma4.embedding_length", {l0.width, d.width}},
      {"expert_width / gemma4.expert_feed_forward_length", {l0.expert_width, d.expert_width}},
      {"expert_count / gemma4.expert_count", {m.experts, d.experts}},
      {"expert_used_count / gemma4.expert_used_count", {m.used, d.used}}};
  bool dims_ok = true;
  for (const auto& [what, v] : agree) {
    if (v.first != v.second) {
      out.push_back(fmt::format("manifest.json: {} disagree: {} vs {}", what, v.first, v.second));
      dims_ok = false;
    }
  }
  if (!dims_ok) return;
  for (std::uint64_t n = 0; n < m.layers.size(); ++n) {
    const ManifestLayer& l = m.layers[n];
    auto g = gemma4_layer(h, d, n);
    if (!g.ok()) {
      out.push_back("the GGUF: " + g.error().to_string());
      continue;
    }
    const Component want[3] = {{g->gate_bytes, g->gate_up_at, g->gate_up_stride, 0},
                               {g->gate_bytes, g->gate_up_at, g->gate_up_stride, g->gate_bytes},
                               {g->down_bytes, g->down_at, g->down_stride, 0}};
    bool ok = true;
    for (int r = 0; r < 3; ++r) {
      const Component& c = l.parts[r];
      if (c.at != want[r].at || c.stride != want[r].stride || c.within != want[r].within) {
        out.push_back(fmt::format(
            "manifest.json: layer {} {}: offset {}, stride {}, within {}; "
            "the GGUF's tensor table says {}, {}, {}",
            n, kRoles[r], c.at, c.stride, c.within, want[r].at, want[r].stride, want[r].within));
        ok = false;
      }
    }
    if (!l.has_scale) {
      out.push_back(
          fmt::format("manifest.json: layer {} has no expert_scale: the runtime would "
                      "use 1.0 and silently drop blk.{}.ffn_down_exps.scale",
                      n, n));
    } else if (l.scale_at != g->scale_at) {
      out.push_back(
          fmt::format("manifest.json: layer {} expert_scale offset {} is not "
                      "blk.{}.ffn_down_exps.scale's {}",
                      n, l.scale_at, n, g->scale_at));
    }
    layout_ok[n] = ok;
  }
}

// Every record of layer `l` against the GGUF's slices, and its padding zero. Called once the
// header matched, the file size is 4096 + E * stride and the components are the GGUF's (so the
// payload is no larger than the GGUF's expert tensors); padding is read a chunk at a time.
std::uint64_t compare_records(const ManifestLayer& l, const ByteSource& packed,
                              const ByteSource& gguf, std::vector<std::string>& out) {
  constexpr std::uint64_t kPadChunk = std::uint64_t{1} << 20;
  RawVector<std::uint8_t> record, slice;
  std::uint64_t checked = 0;
  const std::uint64_t sizes[3] = {l.parts[0].bytes, l.parts[1].bytes, l.parts[2].bytes};
  for (std::uint64_t e = 0; e < l.experts; ++e) {
    record.resize(l.payload);
    const std::uint64_t base = kGemma4HeaderBytes + e * l.stride;
    Status st = packed.read_at(base, record);
    std::uint64_t at = 0;
    bool same = st.ok();
    for (int r = 0; r < 3 && st.ok(); ++r) {
      const Component& c = l.parts[r];
      slice.resize(sizes[r]);
      st = gguf.read_at(c.at + e * c.stride + c.within, slice);
      if (st.ok() && std::memcmp(slice.data(), record.data() + at, sizes[r]) != 0) {
        std::uint64_t k = 0;
        while (slice[k] == record[at + k]) ++k;
        out.push_back(
            fmt::format("{}: expert {}'s {} differs from the GGUF at byte {} of the "
                        "file",
                        l.file, e, kRoles[r], base + at + k));
        same = false;
      }
      at += sizes[r];
    }
    for (std::uint64_t k = l.payload; k < l.stride && st.ok() && same;) {
      slice.resize(std::min(kPadChunk, l.stride - k));
      st = packed.read_at(base + k, slice);
      for (std::uint64_t i = 0; i < slice.size() && st.ok(); ++i) {
        if (slice[i] != 0) {
          out.push_back(fmt::format("{}: expert {}'s padding is not zero at byte {} of the file",
                                    l.file, e, base + k + i));
          same = false;
          break;
        }
      }
      k += slice.size();
    }
    if (!st.ok()) {
      out.push_back(fmt::format("{}: expert {}: {}", l.file, e, st.error().to_string()));
      return checked;
    }
    checked += same;
  }
  return checked;
}

void add_listed(TargetLoadReport& r, std::vector<std::string>& problems) {
  for (std::size_t i = 0; i < problems.size() && i < kMaxListed; ++i) {
    r.unloadable.push_back(std::move(problems[i]));
  }
  if (problems.size() > kMaxListed) {
    r.unloadable.push_back(fmt::format("... and {} more", problems.size() - kMaxListed));
  }
}

}  // namespace

Result<TargetLoadReport> check_load_gemma4(const std::string& dir) {
  TargetLoadReport r;
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  if (path_kind(manifest_path) == PathKind::kMissing) {
    r.missing.push_back("manifest.json (the loader: cannot open manifest)");
    return r;
  }
  // Strict (no duplicate keys, valid UTF-8), where the loader's own parser is lenient.
  auto root = read_json_file(manifest_path, ErrorKind::kInvalidConfig, kGemma4MaxManifestBytes);
  if (!root.ok()) {
    r.unloadable.push_back("manifest.json: " + root.error().to_string());
    return r;
  }
  Manifest m;
  if (auto e = read_manifest(*root, m)) {
    r.unloadable.push_back("manifest.json: " + *e + " (gemma4_backend.c refuses it)");
    return r;
  }
  std::vector<std::string> problems;
  // The GGUF: `source`, absolute or relative to the directory (g4_source_path).
  const fs::path source =
      fs::path(m.source).is_absolute() ? fs::path(m.source) : fs::path(dir) / m.source;
  auto gguf = GgufFile::open(source.string());
  if (!gguf.ok()) {
    r.unloadable.push_back(
        fmt::format("manifest.json: source {} cannot be read, so no record is "
                    "compared: {}",
                    source.string(), gguf.error().to_string()));
    return r;
  }
  std::vector<bool> layout_ok(m.layers.size(), false);
  if (gguf->paths().size() > 1) {
    problems.push_back("manifest.json: source is a split GGUF; one path cannot name its parts");
  } else {
    check_against_gguf(m, gguf->header(), problems, layout_ok);
  }
  // Headers, sizes and records, a layer per task; problems kept in layer order.
  std::vector<std::vector<std::string>> per_layer(m.layers.size());
  std::vector<std::uint64_t> checked(m.layers.size(), 0);
  std::vector<std::optional<std::string>> missing(m.layers.size());
  const ByteSource& from = *gguf->sources().front();
  parallel_for(m.layers.size(), 1, [&](std::size_t b, std::size_t e, std::size_t) {
    for (std::size_t n = b; n < e; ++n) {
      const ManifestLayer& l = m.layers[n];
      const std::string path = (fs::path(dir) / l.file).string();
      if (path_kind(path) == PathKind::kMissing) {
        missing[n] = l.file + " (the runtime would read this layer's records from the GGUF)";
        continue;
      }
      auto packed = FileSource::open(path);
      std::uint8_t header[kGemma4HeaderBytes] = {};
      Status st =
          packed.ok()
              ? (*packed)->read_at(
                    0, {header, std::min<std::uint64_t>(kGemma4HeaderBytes, (*packed)->size())})
              : Status(packed.error());
      if (!st.ok()) {
        per_layer[n].push_back(st.error().to_string());
        continue;
      }
      const std::size_t before = per_layer[n].size();
      check_header(l, header, (*packed)->size(), per_layer[n]);
      if (per_layer[n].size() == before && layout_ok[n]) {
        checked[n] = compare_records(l, **packed, from, per_layer[n]);
      }
    }
  });
  for (std::size_t n = 0; n < m.layers.size(); ++n) {
    if (missing[n]) r.missing.push_back(*missing[n]);
    for (auto& p : per_layer[n]) problems.push_back(std::move(p));
    r.checked += checked[n];
  }
  add_listed(r, problems);
  return r;
}

}  // namespace qrepack
