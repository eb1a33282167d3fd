// The release families (release_check.h): one row per family the engine runs as downloaded,
// the dispatch check-load uses, and the checks the per-family checkers share.
#include "targets/releases/release_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <filesystem>

#include "io/fs_util.h"
#include "io/json_file.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/checkpoint.h"

namespace qrepack {
namespace {

using namespace std::string_view_literals;

// model_types as the engine's family registry and #1305 guard name them
// (reference/colibri-engines.md §1.1, §3).
constexpr std::array kDeepseekV4Types = {"deepseek_v4"sv};
constexpr std::array kDeepseekV41Types = {"deepseek_v41"sv, "deepseek_v41_text"sv};
constexpr std::array kQwen38Types = {"qwen4_exp"sv, "qwen4_exp_text"sv};
constexpr std::array kMimoTypes = {"mimo_v2"sv};
constexpr std::array kKimiK3Types = {"kimi_k3"sv, "kimi_linear"sv};

const std::array kReleaseFamilies = {
    ReleaseFamily{"deepseek_v4", "DeepSeek V4 Flash", "c/deepseek_v4.c", kDeepseekV4Types,
                  check_deepseek_v4_release},
    ReleaseFamily{"deepseek_v41", "DeepSeek V4.1 Flash", "c/deepseek_v41.c", kDeepseekV41Types,
                  check_deepseek_v41_release},
    ReleaseFamily{"qwen4_exp", "Qwen3.8-Flash-Next (official FP8)", "c/qwen38.c", kQwen38Types,
                  check_qwen38_release},
    ReleaseFamily{"mimo_v2", "MiMo-V2.6", "c/mimo.c", kMimoTypes, check_mimo_release},
    ReleaseFamily{"kimi_k3", "Kimi K3 (native MXFP4 experts)", "c/kimi_k3.c", kKimiK3Types,
                  check_kimi_k3_release},
};

bool accepts(Dtype d, std::initializer_list<Dtype> dtypes) {
  for (Dtype x : dtypes) {
    if (x == d) return true;
  }
  return false;
}

std::string dtype_list(std::initializer_list<Dtype> dtypes) {
  std::string s;
  for (Dtype d : dtypes) s += fmt::format("{}{}", s.empty() ? "" : "/", dtype_info(d).safetensors);
  return s;
}

}  // namespace

std::span<const ReleaseFamily> release_families() { return kReleaseFamilies; }

const ReleaseFamily* release_family(std::string_view model_type) {
  for (const ReleaseFamily& f : kReleaseFamilies) {
    for (std::string_view m : f.model_types) {
      if (m == model_type) return &f;
    }
  }
  return nullptr;
}

Result<TargetLoadReport> check_release(const std::string& dir, std::string_view model_type) {
  const ReleaseFamily* f = release_family(model_type);
  if (!f) {
    return Error(ErrorKind::kInternal, fmt::format("model_type \"{}\" is not a release family",
                                                   model_type.substr(0, 64)));
  }
  const std::string p = (std::filesystem::path(dir) / "config.json").string();
  QR_ASSIGN_OR_RETURN(config, read_json_file(p, ErrorKind::kInvalidConfig, kMaxConfigBytes));
  if (!config.is_object()) {
    return Error(ErrorKind::kInvalidConfig, "not a JSON object")
        .in_file(p)
        .with_rule("check_load.config");
  }
  QR_ASSIGN_OR_RETURN(ck, Checkpoint::open(dir));
  TargetLoadReport r;
  Loader l(ck, r);
  QR_TRY(f->check(ReleaseInput{dir, config}, l));
  return r;
}

const Json& release_text_config(const Json& config) {
  return config.contains("text_config") && config["text_config"].is_object() ? config["text_config"]
                                                                             : config;
}

std::uint64_t release_key(const Json& t, std::initializer_list<const char*> keys,
                          TargetLoadReport& r) {
  for (const char* k : keys) {
    if (t.contains(k) && t[k].is_number_unsigned() && t[k].get<std::uint64_t>() <= kMaxDim) {
      return t[k].get<std::uint64_t>();
    }
  }
  std::string names;
  for (const char* k : keys) names += fmt::format("{}\"{}\"", names.empty() ? "" : " or ", k);
  r.unloadable.push_back(fmt::format("config.json: missing or non-numeric {}", names));
  return 0;
}

std::vector<std::uint64_t> release_int_list(const Json& t, const char* key, std::uint64_t n,
                                            TargetLoadReport& r) {
  std::vector<std::uint64_t> out;
  const bool list = t.contains(key) && t[key].is_array() && (n == 0 || t[key].size() == n);
  for (std::size_t i = 0; list && i < t[key].size(); ++i) {
    if (!t[key][i].is_number_unsigned() || t[key][i].get<std::uint64_t>() > kMaxDim) break;
    out.push_back(t[key][i].get<std::uint64_t>());
  }
  if (!list || out.size() != t[key].size()) {
    r.unloadable.push_back(
        n ? fmt::format("config.json: \"{}\" must list {} unsigned integers", key, n)
          : fmt::format("config.json: \"{}\" must be a list of unsigned integers", key));
    out.clear();
  }
  return out;
}

void release_tensor(Loader& l, const std::string& name, std::initializer_list<Dtype> dtypes,
                    std::initializer_list<std::uint64_t> shape) {
  const auto t = l.get(name);
  if (!t) return;
  const auto got = t->entry->shape;
  const bool same =
      got.size() == shape.size() && std::equal(shape.begin(), shape.end(), got.begin());
  if (!accepts(t->entry->dtype, dtypes)) {
    l.bad(name, fmt::format("dtype {}, the loader reads {}",
                            dtype_info(t->entry->dtype).safetensors, dtype_list(dtypes)));
  } else if (!same) {
    l.bad(name, fmt::format("shape [{}], the loader reads [{}]", fmt::join(got, ", "),
                            fmt::join(shape, ", ")));
  } else {
    ++l.report().checked;
  }
}

void release_floats(Loader& l, const std::string& name, std::uint64_t numel, bool f16) {
  const auto t = l.get(name);
  if (!t) return;
  const Dtype d = t->entry->dtype;
  const bool ok = d == Dtype::kF32 || d == Dtype::kBF16 || (f16 && d == Dtype::kF16);
  if (!ok) {
    l.bad(name, fmt::format("dtype {}, the loader reads {}", dtype_info(d).safetensors,
                            f16 ? "F32/BF16/F16" : "F32/BF16"));
  } else if (t->entry->numel() != numel) {
    l.bad(name, fmt::format("{} elements, the config implies {}", t->entry->numel(), numel));
  } else {
    ++l.report().checked;
  }
}

void release_fp8(Loader& l, const std::string& weight, const std::string& scale, std::uint64_t o,
                 std::uint64_t i, std::uint64_t b, std::initializer_list<Dtype> scale_dtypes) {
  release_tensor(l, weight, {Dtype::kF8E4M3}, {o, i});
  release_tensor(l, scale, scale_dtypes, {ceil_div(o, b), ceil_div(i, b)});
}

void release_fp4(Loader& l, const std::string& weight, const std::string& scale, std::uint64_t o,
                 std::uint64_t i) {
  release_tensor(l, weight, {Dtype::kI8, Dtype::kU8}, {o, i / 2});
  release_tensor(l, scale, {Dtype::kF8E8M0, Dtype::kU8}, {o, i / 32});
}

}  // namespace qrepack
