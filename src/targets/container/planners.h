// The family + target planners behind plan_container, one per container target, and the
// pieces they share: files and units built as they are named, source records, side files.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qrepack/targets/container.h"

namespace qrepack {

Result<ContainerPlan> plan_qwen36(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_qwen3_dense(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_llama(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_olmoe(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_glm53(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_qwen38_int4(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_qwen38_sidecar(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_inkling(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_inkling_dense(const Checkpoint& ck, const ContainerOptions& o);
Result<ContainerPlan> plan_kimi_k3(const Checkpoint& ck, const ContainerOptions& o);

/// Builds a ContainerPlan's files and units as they are named.
class ContainerBuilder {
 public:
  explicit ContainerBuilder(ContainerPlan& plan) : plan_(plan) {}
  /// Starts a new output file; later tensors go into it.
  void file(std::string name, std::map<std::string, std::string> metadata = {});
  /// The raw tensor copied unchanged under `name`.
  void copy(const TensorRef& raw, std::string name);
  /// A float weight stored as `dtype` under `name`, with its logical shape (or `shape`, of
  /// as many elements: a strided view of a 3-D tensor written 3-D).
  void cast(const LogicalWeight& w, Dtype dtype, std::string name,
            std::vector<std::uint64_t> shape = {});
  /// A raw BF16 / F16 / F32 tensor of any rank (a 3-D conv kernel) stored as `dtype`.
  void cast_raw(const TensorRef& raw, Dtype dtype, std::string name);
  /// `pieces` quantized into `name` (U8 or I8 of `data_shape`) and `scales_name`
  /// (F32 of `scales_shape`).
  void quant(std::vector<UnitPiece> pieces, std::string name, Dtype dtype,
             std::vector<std::uint64_t> data_shape, std::string scales_name,
             std::vector<std::uint64_t> scales_shape);
  /// Records what happened to source tensor `name`.
  void source(std::string_view name, std::string_view disposition, std::string_view rule);
  /// Counts one output in the PLAN summary under `what`.
  void count(const std::string& what) { ++plan_.counts[what]; }
  /// Orders every file's tensors for alignment (wider elements first, stable), fixing the
  /// units' tensor indices to match.
  void sort_files_for_alignment();
  /// File `f`'s tensors in the order `order` lists their current positions (a permutation).
  void order_file(std::uint32_t f, const std::vector<std::uint32_t>& order);

 private:
  std::uint32_t add_tensor(TensorSpec spec);
  ContainerPlan& plan_;
};

/// The checkpoint's weights by name (recognized without a family: float, FP8 and NVFP4 sources
/// decode through WeightReader), held by `plan`; sidecars consumed are recorded as such.
struct WeightIndex {
  std::unordered_map<std::string_view, const LogicalWeight*> by_name;
  /// Tensors no recognizer claims (3-D tensors, stray scales), with the reason.
  std::vector<std::pair<std::string, std::string>> unclaimed;
};
Result<WeightIndex> index_weights(const Checkpoint& ck, ContainerPlan& plan,
                                  const MoeConfig* config = nullptr);

/// Starts a container plan: its family and model_type (config.json's, else `default_type`),
/// the checkpoint's weights by name, and what recognition left unclaimed as `problems`.
Result<WeightIndex> start_plan(const Checkpoint& ck, ContainerPlan& plan, std::string family,
                               const nlohmann::ordered_json& config, const char* default_type,
                               std::vector<std::string>& problems);

/// A config.json problem of `dir`'s, under `rule`.
Error config_key_error(const std::string& dir, std::string message, std::string_view rule);
/// A positive integer config key (at most kMaxDim), or `fallback` when absent or null; a
/// missing key without fallback, or a bad value, is one error naming the file, key and rule.
Result<std::uint64_t> config_dim(const nlohmann::ordered_json& c, const char* key,
                                 const std::string& dir, std::string_view rule,
                                 std::optional<std::uint64_t> fallback = std::nullopt);
/// A string config key, or `fallback` when absent or not a string.
std::string json_string(const nlohmann::ordered_json& c, const char* key, std::string fallback);
/// A number config key, or `fallback`.
Result<double> config_number(const nlohmann::ordered_json& c, const char* key,
                             const std::string& dir, std::string_view rule,
                             std::optional<double> fallback = std::nullopt);

/// Source side files copied when present (config handled by each target).
void copy_side_files(ContainerPlan& plan, const std::string& src_dir,
                     std::initializer_list<std::string_view> names);
/// generation_config.json: copied when the source has one, else written from config.json's
/// eos_token_id (top level or text_config) when it has one (the runtimes stop on it; upstream
/// #1478). Returns whether one was synthesized.
bool add_generation_config(ContainerPlan& plan, const std::string& src_dir,
                           const nlohmann::ordered_json& config);
/// Python's json.dumps(value, indent=indent) text (", " / ": " separators, ASCII escapes,
/// floats in repr form); indent < 0 is the single-line default.
std::string python_json(const nlohmann::ordered_json& value, int indent);
/// Reads and strictly parses `dir`/config.json (required: a missing one is an error naming the
/// target).
Result<nlohmann::ordered_json> read_config(const std::string& dir, std::string_view target);

/// The parameters a run from a GGUF records (qrepack.json, the state files that --resume and
/// merge compare) for `target` written `to`: the keys container_parameters writes, every bits
/// key 0, and source_format "gguf".
nlohmann::json gguf_run_parameters(std::string_view target, std::string_view to);
/// Reads and strictly parses the JSON object at `path` (at most kMaxConfigBytes), keeping its
/// key order; not an object: refused under `rule`.
Result<nlohmann::ordered_json> read_json_object(const std::string& path, std::string_view rule);
/// The unknown-name refusal: up to 12 names, one line, before any output.
Error unknown_tensors_error(const std::string& dir, std::string_view target,
                            const std::vector<std::string>& names);

}  // namespace qrepack
