// `qrepack inspect FILE.gguf` (src/cli/inspect_gguf.h). Reads the header only.
#include "cli/inspect_gguf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "qrepack/formats/ggml_quants.h"
#include "qrepack/io/gguf.h"

namespace qrepack::cli {
namespace {

using Json = nlohmann::ordered_json;

// A value in one short line: scalars as written, strings up to 60 bytes, arrays by size.
std::string value_text(const GgufValue& v) {
  if (v.type == GgufType::kArray) {
    return fmt::format("[{} x {}]", v.array->items.size(), gguf_type_name(v.array->element));
  }
  if (v.type == GgufType::kString) {
    const std::string s = v.s.size() > 60 ? v.s.substr(0, 60) + "..." : v.s;
    return Json(s).dump(-1, ' ', true, Json::error_handler_t::replace);
  }
  if (v.type == GgufType::kBool) return v.u ? "true" : "false";
  if (v.is_float()) return fmt::format("{}", v.f);
  return v.is_signed() ? fmt::format("{}", v.as_i64()) : fmt::format("{}", v.u);
}

std::string type_name(std::uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t ? std::string(t->name) : fmt::format("type {} (newer than qrepack)", id);
}

Status print_json(const std::vector<std::string>& paths, const GgufHeader& h,
                  const std::vector<const GgufTensor*>& shown) {
  Json out;
  out["path"] = paths.front();
  if (paths.size() > 1) out["parts"] = paths;
  out["format"] = "gguf";
  out["version"] = h.version;
  out["alignment"] = h.alignment;
  out["data_start"] = h.data_start;
  Json tensors = Json::array();
  for (const GgufTensor* t : shown) {
    tensors.push_back({{"name", t->name},
                       {"ggml_type", type_name(t->ggml_type)},
                       {"dims", t->dims},
                       {"bytes", t->sized ? Json(t->bytes) : Json(nullptr)},
                       {"offset", t->offset}});
    if (paths.size() > 1) tensors.back()["part"] = t->part + 1;  // of the split set, 1-based
  }
  out["tensors"] = std::move(tensors);
  Json meta = Json::object();
  for (const GgufKv& kv : h.metadata) {
    meta[kv.key] = {{"type", gguf_type_name(kv.value.type)}, {"value", value_text(kv.value)}};
  }
  out["metadata"] = std::move(meta);
  fmt::print("{}\n", out.dump(2, ' ', false, Json::error_handler_t::replace));
  return ok_status();
}

}  // namespace

Status run_inspect_gguf(const std::string& path, bool json,
                        const std::optional<NamePattern>& filter) {
  QR_ASSIGN_OR_RETURN(file_path, resolve_gguf_file(path));
  QR_ASSIGN_OR_RETURN(f, GgufFile::open(file_path));
  const GgufHeader& h = f.header();
  std::vector<const GgufTensor*> shown;
  std::map<std::string, std::pair<std::size_t, std::uint64_t>> totals;
  std::uint64_t bytes = 0;
  for (const GgufTensor& t : h.tensors) {
    if (filter && !filter->search(t.name)) continue;
    shown.push_back(&t);
    auto& tot = totals[type_name(t.ggml_type)];
    ++tot.first;
    tot.second += t.bytes;
    bytes += t.bytes;
  }
  if (json) return print_json(f.paths(), h, shown);
  print_table(stdout, {"NAME", "GGML TYPE", "DIMS (GGUF ORDER)", "BYTES", "OFFSET"},
              {false, false, false, true, true}, shown.size(), [&](std::size_t i) {
                const GgufTensor& t = *shown[i];
                return std::vector<std::string>{
                    t.name, type_name(t.ggml_type), fmt::format("[{}]", fmt::join(t.dims, ", ")),
                    t.sized ? fmt::format("{}", t.bytes) : std::string("?"),
                    fmt::format("{}", t.offset)};
              });
  fmt::print("\n");
  Table per_type({"GGML TYPE", "TENSORS", "BYTES", ""}, {false, true, true, false});
  for (const auto& [name, tot] : totals) {
    per_type.add({name, fmt::format("{}", tot.first), fmt::format("{}", tot.second),
                  human_bytes(tot.second)});
  }
  per_type.add(
      {"total", fmt::format("{}", shown.size()), fmt::format("{}", bytes), human_bytes(bytes)});
  per_type.print(stdout);
  fmt::print("\nGGUF v{}, {} tensors, {} metadata keys, alignment {}, data at byte {}{}\n",
             h.version, h.tensors.size(), h.metadata.size(), h.alignment, h.data_start,
             f.paths().size() > 1 ? fmt::format(" (first part); split into {} files: {}",
                                                f.paths().size(), fmt::join(f.paths(), ", "))
                                  : "");
  Table meta({"KEY", "TYPE", "VALUE"});
  for (const GgufKv& kv : h.metadata) {
    meta.add({kv.key, std::string(gguf_type_name(kv.value.type)), value_text(kv.value)});
  }
  meta.print(stdout);
  const GgufValue* arch = h.find("general.architecture");
  const std::string_view name =
      arch && arch->type == GgufType::kString ? std::string_view(arch->s) : std::string_view();
  fmt::print("target: {}\n",
             name == "olmoe"    ? "colibri-olmoe (runtime c/olmoe.c): convert writes it"
             : name == "gemma4" ? "colibri-gemma4 (runtime c/gemma4.c): convert writes its "
                                  "expert packs (PACKED_DIR)"
                                : "none: convert reads OLMoE and Gemma 4 GGUFs only");
  return ok_status();
}

}  // namespace qrepack::cli
