// ContainerBuilder and the side-file helpers the container targets share (targets/planners.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"
#include "targets/container/planners.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

// The order of the reference safetensors writer's dtype enum (its files sort tensors by dtype,
// largest first, then by name): BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32,
// F32, F64, I64, U64.
int dtype_rank(Dtype d) {
  switch (d) {
    case Dtype::kBool:
      return 0;
    case Dtype::kU8:
      return 1;
    case Dtype::kI8:
      return 2;
    case Dtype::kF8E5M2:
      return 3;
    case Dtype::kF8E4M3:
      return 4;
    case Dtype::kI16:
      return 5;
    case Dtype::kU16:
      return 6;
    case Dtype::kF16:
      return 7;
    case Dtype::kBF16:
      return 8;
    case Dtype::kI32:
      return 9;
    case Dtype::kU32:
      return 10;
    case Dtype::kF32:
      return 11;
    case Dtype::kF64:
      return 12;
    case Dtype::kI64:
      return 13;
    case Dtype::kU64:
      return 14;
    default:
      return 15;
  }
}

void python_string(std::string& out, const std::string& s) {
  out += '"';
  // ensure_ascii: every non-ASCII code point as \uXXXX (surrogate pairs above the BMP).
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = c;
    std::size_t len = 1;
    if (c >= 0xF0) {
      cp = c & 0x07, len = 4;
    } else if (c >= 0xE0) {
      cp = c & 0x0F, len = 3;
    } else if (c >= 0xC0) {
      cp = c & 0x1F, len = 2;
    }
    for (std::size_t k = 1; k < len && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    i += len;
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (cp >= 0x7F && cp < 0x10000)) {
      out += fmt::format("\\u{:04x}", cp);
    } else if (cp >= 0x10000) {
      cp -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      out += static_cast<char>(cp);
    }
  }
  out += '"';
}

// Python's float repr: the shortest round-trip digits, exponent form below 1e-4 or from 1e16.
std::string python_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  std::string s = fmt::format("{}", v);  // shortest round-trip
  // fmt gives "1e-05" / "1e+16" forms where Python does; make sure a plain integer keeps ".0".
  const bool has_exp = s.find('e') != std::string::npos;
  const double a = std::fabs(v);
  if (!has_exp && (a >= 1e16 || (a != 0 && a < 1e-4))) {
    s = fmt::format("{:e}", v);
  }
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  // Python writes 1e-05, fmt 1e-05; Python 1e+16, fmt 1e+16: the same.
  return s;
}

void python_json_into(std::string& out, const nlohmann::ordered_json& v, int indent, int depth) {
  const auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(depth + 1);
        python_string(out, k);
        out += ": ";
        python_json_into(out, x, indent, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case nlohmann::ordered_json::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(depth + 1);
        python_json_into(out, x, indent, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case nlohmann::ordered_json::value_t::string:
      python_string(out, v.get_ref<const std::string&>());
      return;
    case nlohmann::ordered_json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case nlohmann::ordered_json::value_t::number_float:
      out += python_float(v.get<double>());
      return;
    case nlohmann::ordered_json::value_t::null:
      out += "null";
      return;
    default:
      out += v.dump();  // integers
      return;
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  python_json_into(out, value, indent, 0);
  return out;
}

void ContainerBuilder::file(std::string name, std::map<std::string, std::string> metadata) {
  plan_.files.push_back({std::move(name), {}, std::move(metadata), {}});
}

std::uint32_t ContainerBuilder::add_tensor(TensorSpec spec) {
  auto& t = plan_.files.back().tensors;
  t.push_back(std::move(spec));
  return static_cast<std::uint32_t>(t.size() - 1);
}

void ContainerBuilder::copy(const TensorRef& raw, std::string name) {
  ContainerUnit u;
  u.kind = UnitKind::kCopy;
  u.file = static_cast<std::uint32_t>(plan_.files.size() - 1);
  u.raw = raw;
  u.data = add_tensor(
      {std::move(name), raw.entry->dtype, {raw.entry->shape.begin(), raw.entry->shape.end()}});
  plan_.units.push_back(std::move(u));
}

void ContainerBuilder::cast(const LogicalWeight& w, Dtype dtype, std::string name,
                            std::vector<std::uint64_t> shape) {
  ContainerUnit u;
  u.kind = UnitKind::kCast;
  u.file = static_cast<std::uint32_t>(plan_.files.size() - 1);
  u.weight = &w;
  u.dtype = dtype;
  if (shape.empty()) shape = std::vector<std::uint64_t>(w.shape);
  u.data = add_tensor({std::move(name), dtype, std::move(shape)});
  plan_.units.push_back(std::move(u));
}

void ContainerBuilder::cast_raw(const TensorRef& raw, Dtype dtype, std::string name) {
  ContainerUnit u;
  u.kind = UnitKind::kCast;
  u.file = static_cast<std::uint32_t>(plan_.files.size() - 1);
  u.raw = raw;
  u.dtype = dtype;
  u.data = add_tensor({std::move(name), dtype, {raw.entry->shape.begin(), raw.entry->shape.end()}});
  plan_.units.push_back(std::move(u));
}

void ContainerBuilder::quant(std::vector<UnitPiece> pieces, std::string name, Dtype dtype,
                             std::vector<std::uint64_t> data_shape, std::string scales_name,
                             std::vector<std::uint64_t> scales_shape) {
  ContainerUnit u;
  u.kind = UnitKind::kQuant;
  u.file = static_cast<std::uint32_t>(plan_.files.size() - 1);
  u.pieces = std::move(pieces);
  u.data = add_tensor({std::move(name), dtype, std::move(data_shape)});
  u.scales = add_tensor({std::move(scales_name), Dtype::kF32, std::move(scales_shape)});
  plan_.units.push_back(std::move(u));
}

void ContainerBuilder::source(std::string_view name, std::string_view disposition,
                              std::string_view rule) {
  plan_.sources.push_back({std::string(name), std::string(disposition), std::string(rule)});
}

void ContainerBuilder::sort_files_for_alignment() {
  for (std::uint32_t f = 0; f < plan_.files.size(); ++f) {
    const auto& t = plan_.files[f].tensors;
    std::vector<std::uint32_t> order(t.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const int ra = dtype_rank(t[a].dtype), rb = dtype_rank(t[b].dtype);
      return ra != rb ? ra > rb : t[a].name < t[b].name;
    });
    order_file(f, order);
  }
}

void ContainerBuilder::order_file(std::uint32_t f, const std::vector<std::uint32_t>& order) {
  auto& t = plan_.files[f].tensors;
  QR_CHECK(order.size() == t.size(), "order_file: not a permutation of the file's tensors");
  std::vector<std::uint32_t> where(t.size());
  std::vector<TensorSpec> sorted;
  sorted.reserve(t.size());
  for (std::uint32_t k = 0; k < order.size(); ++k) {
    where[order[k]] = k;
    sorted.push_back(std::move(t[order[k]]));
  }
  t = std::move(sorted);
  for (ContainerUnit& u : plan_.units) {
    if (u.file != f) continue;
    u.data = where[u.data];
    if (u.kind == UnitKind::kQuant) u.scales = where[u.scales];
  }
}

void copy_side_files(ContainerPlan& plan, const std::string& src_dir,
                     std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    const fs::path p = fs::path(src_dir) / n;
    if (path_kind(p.string()) == PathKind::kRegular) {
      plan.side_files.push_back({std::string(n), "", p.string(), ""});
    }
  }
}

bool add_generation_config(ContainerPlan& plan, const std::string& src_dir,
                           const nlohmann::ordered_json& config) {
  const fs::path p = fs::path(src_dir) / "generation_config.json";
  if (path_kind(p.string()) == PathKind::kRegular) {
    plan.side_files.push_back({"generation_config.json", "", p.string(), ""});
    return false;
  }
  const nlohmann::ordered_json* eos = nullptr;
  if (config.contains("eos_token_id")) {
    eos = &config["eos_token_id"];
  } else if (config.contains("text_config") && config["text_config"].is_object() &&
             config["text_config"].contains("eos_token_id")) {
    eos = &config["text_config"]["eos_token_id"];
  }
  if (!eos || !(eos->is_number_integer() || eos->is_array())) return false;
  nlohmann::ordered_json g;
  g["eos_token_id"] = *eos;
  plan.side_files.push_back({"generation_config.json", python_json(g, 2) + "\n", "", ""});
  return true;
}

Result<nlohmann::ordered_json> read_config(const std::string& dir, std::string_view target) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (path_kind(path) == PathKind::kMissing) {
    return Error(ErrorKind::kInvalidConfig,
                 fmt::format("--target {} needs config.json beside the checkpoint", target))
        .in_file(path)
        .with_rule("target.config");
  }
  return read_json_object(path, "target.config");
}

Result<nlohmann::ordered_json> read_json_object(const std::string& path, std::string_view rule) {
  QR_ASSIGN_OR_RETURN(text, read_small_file(path, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto strict = parse_json_strict(text, ErrorKind::kInvalidConfig);  // UTF-8, keys, depth
  if (!strict.ok()) return std::move(strict.error().in_file(path));
  if (!strict->is_object()) {
    return Error(ErrorKind::kInvalidConfig,
                 fmt::format("{} is not a JSON object", fs::path(path).filename().string()))
        .in_file(path)
        .with_rule(rule);
  }
  // The same text again, keeping the file's key order (the targets rewrite files in it).
  return nlohmann::ordered_json::parse(text, nullptr, false);
}

Error unknown_tensors_error(const std::string& dir, std::string_view target,
                            const std::vector<std::string>& names) {
  const std::size_t shown = std::min<std::size_t>(names.size(), 12);
  std::string list;
  for (std::size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + names[i];
  return Error(ErrorKind::kUnclaimedTensor,
               fmt::format("{} tensor(s) or layer(s) the {} container cannot place or load: {}{}",
                           names.size(), target, list, names.size() > shown ? ", ..." : ""))
      .in_file(dir)
      .with_rule("target.unknown_tensor");
}

}  // namespace qrepack

namespace qrepack {

Result<WeightIndex> start_plan(const Checkpoint& ck, ContainerPlan& plan, std::string family,
                               const nlohmann::ordered_json& config, const char* default_type,
                               std::vector<std::string>& problems) {
  plan.family = std::move(family);
  plan.model_type = json_string(config, "model_type", default_type);
  QR_ASSIGN_OR_RETURN(ix, index_weights(ck, plan));
  for (const auto& [name, why] : ix.unclaimed) problems.push_back(name + " (" + why + ")");
  return ix;
}

Error config_key_error(const std::string& dir, std::string message, std::string_view rule) {
  return Error(ErrorKind::kInvalidConfig, std::move(message))
      .in_file((fs::path(dir) / "config.json").string())
      .with_rule(rule);
}

Result<WeightIndex> index_weights(const Checkpoint& ck, ContainerPlan& plan,
                                  const MoeConfig* config) {
  QR_ASSIGN_OR_RETURN(rec, recognize_weights(ck, config));
  plan.recognized = std::make_shared<Recognized>(std::move(rec));
  WeightIndex ix;
  for (const LogicalWeight& w : plan.recognized->weights) ix.by_name.emplace(w.name, &w);
  ix.unclaimed = plan.recognized->unclaimed;
  ContainerBuilder b(plan);
  for (const auto& [sidecar, weight] : plan.recognized->consumed) {
    b.source(sidecar, "consume", fmt::format("sidecar of {}", weight));
  }
  for (const auto& [name, rule] : plan.recognized->dropped) b.source(name, "drop", rule);
  return ix;
}

Result<std::uint64_t> config_dim(const nlohmann::ordered_json& c, const char* key,
                                 const std::string& dir, std::string_view rule,
                                 std::optional<std::uint64_t> fallback) {
  if (!c.contains(key) || c[key].is_null()) {
    if (fallback) return *fallback;
    return config_key_error(dir, fmt::format("config.json lacks \"{}\"", key), rule);
  }
  const auto& v = c[key];
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 || v.get<std::uint64_t>() > kMaxDim) {
    return config_key_error(dir,
                            fmt::format("\"{}\" must be a positive integer <= {}, got {}", key,
                                        kMaxDim, v.dump().substr(0, 64)),
                            rule);
  }
  return v.get<std::uint64_t>();
}

std::string json_string(const nlohmann::ordered_json& c, const char* key, std::string fallback) {
  if (!c.is_object() || !c.contains(key) || !c[key].is_string()) return fallback;
  return c[key].get<std::string>();
}

Result<double> config_number(const nlohmann::ordered_json& c, const char* key,
                             const std::string& dir, std::string_view rule,
                             std::optional<double> fallback) {
  if (!c.contains(key) || c[key].is_null()) {
    if (fallback) return *fallback;
    return config_key_error(dir, fmt::format("config.json lacks \"{}\"", key), rule);
  }
  const auto& v = c[key];
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    return config_key_error(
        dir, fmt::format("\"{}\" must be a finite number, got {}", key, v.dump().substr(0, 64)),
        rule);
  }
  return v.get<double>();
}

}  // namespace qrepack
