#include "model/qwen38_oracle.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "model/forward_ops.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;

// SHA-256 of rows [r0, r0 + n) of m as f32 little-endian bytes (row-major).
std::string digest(const Matrix& m, std::uint64_t r0, std::uint64_t n) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(m.row(r0));
  return sha256_hex(std::span(bytes, n * m.cols * 4));  // little-endian hosts only
}

// make_qwen38_tiny.py's summary() of rows [r0, r0 + n) of one pass.
Json summary(const Oracle& o, std::uint64_t r0, std::uint64_t n, std::uint64_t layers) {
  const Matrix &l = o.tf_logits, &h = o.tf_hidden;
  Json j;
  j["logits_shape"] = {1, n, l.cols};
  j["logits_sha256"] = digest(l, r0, n);
  j["last_logits_argmax"] = model::argmax(std::span(l.row(r0 + n - 1), l.cols));
  j["last_hidden_shape"] = {1, n, h.cols};
  j["last_hidden_sha256"] = digest(h, r0, n);
  j["router_layers"] = layers;  // every layer is MoE
  return j;
}

Error oracle_error(std::string message) {
  return Error(ErrorKind::kInternal, std::move(message)).with_rule("oracle.qwen38");
}

}  // namespace

Result<std::string> qwen38_reference_document(const Oracle& o, const OracleProvenance& p) {
  const std::uint64_t S = o.prompt.size();
  if (o.full.size() <= S || o.tf_logits.rows != o.full.size() ||
      o.tf_hidden.rows != o.full.size()) {
    return oracle_error("ref.json schema 2 needs one generated token and the pass's hidden states");
  }
  const std::string path = (std::filesystem::path(p.config_dir) / "config.json").string();
  QR_ASSIGN_OR_RETURN(text, read_small_file(path, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto parsed = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!parsed.ok()) return std::move(parsed.error().in_file(path));
  const nlohmann::json& root = *parsed;
  const bool wrapped = root.contains("text_config") && root["text_config"].is_object();
  const nlohmann::json& t = wrapped ? root["text_config"] : root;
  const nlohmann::json* q =
      root.contains("quantization_config") ? &root["quantization_config"] : nullptr;
  const std::uint64_t layers =
      t.contains("num_hidden_layers") && t["num_hidden_layers"].is_number_unsigned()
          ? t["num_hidden_layers"].get<std::uint64_t>()
          : 0;
  Json j;
  j["schema_version"] = 2;
  j["model"] = p.model;
  j["seed"] = nullptr;
  j["transformers_version"] = nullptr;
  j["text_only"] = true;
  j["fp8_experts"] = q && q->is_object() && q->contains("quant_method") &&
                     (*q)["quant_method"] == nlohmann::json("fp8");
  j["naming"] = wrapped ? "release Qwen4ExpForConditionalGeneration (model.language_model prefix)"
                        : "upstream Qwen4ExpForCausalLM (no model.language_model prefix)";
  Json cs;
  for (const char* key : {"hidden_size", "num_hidden_layers", "layer_types", "ple_layer_ids",
                          "num_experts", "num_experts_per_tok", "tie_word_embeddings"}) {
    cs[key] = t.contains(key) ? Json::parse(t[key].dump()) : Json(nullptr);
  }
  j["config_summary"] = std::move(cs);
  j["reference_dtype"] = "float32";
  j["prefill"] = summary(o, 0, S, layers);
  Json decode;
  decode["input_ids"] = {o.full[S]};
  const Json step = summary(o, S, 1, layers);
  for (const auto& [k, v] : step.items()) decode[k] = v;
  j["decode"] = std::move(decode);
  j["prompt_ids"] = o.prompt;
  j["full_ids"] = o.full;
  j["generated_ids"] = TokenIds(o.full.begin() + static_cast<std::ptrdiff_t>(S), o.full.end());
  // The logits that chose the last generated id.
  const float* last = o.tf_logits.row(o.full.size() - 2);
  std::vector<double> final_logits(last, last + o.tf_logits.cols);
  j["final_logits"] = final_logits;
  j["cache_class"] = nullptr;
  return j.dump(2, ' ', false) + "\n";
}

}  // namespace qrepack
