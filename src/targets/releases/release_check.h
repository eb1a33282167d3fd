// Families the engine runs from the vendor's files as downloaded (reference/colibri-engines.md
// §0 item 3, §3): there is nothing to convert, so the question a user has before a multi-hour
// start is "will it load?". One row per family: the model_types its config.json carries, the
// runtime that loads it and a checker mirroring that runtime's loader (every tensor it looks
// up, the dtype and shape it reads, the config keys and side files it needs). `check-load DIR`
// runs the row's checker when DIR has no qrepack.json naming a target; `convert` refuses such
// a checkpoint in one line when no target converts its model_type.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "qrepack/targets/check_load.h"
#include "targets/container/check_load_parts.h"

namespace qrepack {

/// What a release checker sees: the directory (for side files), its config.json and the
/// shards as the runtimes' safetensors reader sees them.
struct ReleaseInput {
  const std::string& dir;
  const Json& config;
};

struct ReleaseFamily {
  std::string_view name;     ///< "deepseek_v41"
  std::string_view title;    ///< "DeepSeek V4.1 Flash"
  std::string_view runtime;  ///< the engine runtime that loads the vendor's files
  std::span<const std::string_view> model_types;
  /// Adds to l's report whatever the runtime's loader would refuse.
  Status (*check)(const ReleaseInput& in, Loader& l);
};

/// Every family the engine runs as downloaded.
std::span<const ReleaseFamily> release_families();
/// The row whose model_types include `model_type`, or null.
const ReleaseFamily* release_family(std::string_view model_type);
/// Checks `dir` as the runtime of `model_type`'s release family loads it. Errors when the
/// model_type has no row or the directory cannot be read (no config.json, a bad header).
Result<TargetLoadReport> check_release(const std::string& dir, std::string_view model_type);

/// The checkers, one file per family (release_check_*.cc).
Status check_deepseek_v4_release(const ReleaseInput& in, Loader& l);
Status check_deepseek_v41_release(const ReleaseInput& in, Loader& l);
Status check_qwen38_release(const ReleaseInput& in, Loader& l);
Status check_mimo_release(const ReleaseInput& in, Loader& l);
/// Kimi K3 (kimi_k3_check.cc): the loader that also reads a colibri-kimi-k3 container.
Status check_kimi_k3_release(const ReleaseInput& in, Loader& l);

// Shared by the checkers (release_check.cc).

/// config["text_config"] when it is an object, else config.
const Json& release_text_config(const Json& config);
/// The first of `keys` present as an unsigned integer (aliases, as the loaders read them);
/// else a "config.json: missing ..." entry in the report and 0.
std::uint64_t release_key(const Json& t, std::initializer_list<const char*> keys,
                          TargetLoadReport& r);
/// An unsigned integer array of exactly `n` entries (n 0: any length), or an entry in the
/// report and an empty vector.
std::vector<std::uint64_t> release_int_list(const Json& t, const char* key, std::uint64_t n,
                                            TargetLoadReport& r);
/// Tensor `name` with one of `dtypes` and exactly `shape`.
void release_tensor(Loader& l, const std::string& name, std::initializer_list<Dtype> dtypes,
                    std::initializer_list<std::uint64_t> shape);
/// A float tensor (F32 or BF16; F16 too when `f16`) of exactly `numel` elements, any rank.
void release_floats(Loader& l, const std::string& name, std::uint64_t numel, bool f16 = false);
/// `weight` F8_E4M3 [o, i] and `scale` (one of `scale_dtypes`) [ceil(o/b), ceil(i/b)].
void release_fp8(Loader& l, const std::string& weight, const std::string& scale, std::uint64_t o,
                 std::uint64_t i, std::uint64_t b, std::initializer_list<Dtype> scale_dtypes);
/// An FP4 (e2m1) matrix [o, i]: `weight` I8 or U8 [o, i/2] and `scale` F8_E8M0 or U8
/// [o, i/32] (one UE8M0 per row group of 32).
void release_fp4(Loader& l, const std::string& weight, const std::string& scale, std::uint64_t o,
                 std::uint64_t i);

}  // namespace qrepack
