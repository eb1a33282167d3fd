// The runtimes' reference files, field for field as their upstream generators write them
// (json.dumps with the generator's indent; docs/model.md lists the sources).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "model/qwen38_oracle.h"
#include "qrepack/model/glm53_forward.h"
#include "qrepack/model/inkling_forward.h"
#include "qrepack/model/oracle.h"
#include "qrepack/model/qwen38_forward.h"

namespace qrepack {
namespace {

using Json = nlohmann::ordered_json;

const OracleSchemaInfo kSchemas[] = {
    {OracleSchema::kGlm,
     "ref_glm.json",
     "c/colibri.c",
     {3, 14, 159, 26, 53, 58, 200, 11, 77, 240, 5, 99},
     20},
    {OracleSchema::kLlama, "ref_llama.json", "c/llama.c", {1, 2, 3, 4, 5}, 64},
    {OracleSchema::kQwen3, "ref.json", "c/qwen3.c", {1, 2, 3, 4, 5}, 16},
    {OracleSchema::kQwen36, "ref_qwen36.json", "c/qwen36.c", {1, 2, 3, 4, 5}, 16},
    {OracleSchema::kOlmoe, "ref_olmoe.json", "c/olmoe.c", {1, 2, 3, 4, 5}, 12},
    {OracleSchema::kInkling,
     "ref_inkling.json",
     "c/inkling.c",
     {7, 42, 199, 3, 88, 154, 21, 60, 9, 133, 77, 245},
     24},
    // kimi_k3.c has no reference file and no generator: ref_glm.json's fields, the tiny
    // generators' prompt, and the runtime's own --ngen default.
    {OracleSchema::kKimiK3, "ref_kimi_k3.json", "c/kimi_k3.c", {1, 2, 3, 4, 5}, 32},
    // make_glm53_tiny.py's oracle(): its prompt, four greedy tokens.
    {OracleSchema::kGlm53, "ref.json", "c/glm53.c", {5, 7, 9, 11, 13, 17, 19, 23}, 4},
    // make_qwen38_tiny.py's defaults: prompt [1, 3, 4, 5, 6], --max-new 8.
    {OracleSchema::kQwen38, "ref.json", "c/qwen38.c", {1, 3, 4, 5, 6}, 8},
    // make_dsv41_tiny.py: a prompt of --prompt-len 12 drawn by torch.randint(0, 256) from a
    // generator seeded 20260911 (these ids, Debian torch 1.13), --max-new 8.
    {OracleSchema::kDeepseekV41,
     "ref.json",
     "c/deepseek_v41.c",
     {177, 108, 28, 250, 26, 4, 230, 64, 62, 183, 111, 196},
     8},
    // make_deepseek_v4_tiny.py's "compressed" case: 5 + 7i mod 97 for i < 20, four new tokens.
    {OracleSchema::kDeepseekV4,
     "ref.json",
     "c/deepseek_v4.c",
     {5, 12, 19, 26, 33, 40, 47, 54, 61, 68, 75, 82, 89, 96, 6, 13, 20, 27, 34, 41},
     4},
};

Json ids(const TokenIds& v) { return Json(v); }

Json llama_document(const Oracle& o, const OracleProvenance& p) {
  Json shards = Json::object();
  for (const auto& [file, sha] : p.shards) shards[file] = sha;
  const TokenIds generated(o.full.begin() + static_cast<std::ptrdiff_t>(o.prompt.size()),
                           o.full.end());
  Json j;
  j["repo"] = p.model;
  j["revision"] = "";
  j["shards"] = std::move(shards);
  j["prompt"] = nullptr;  // ids given, no tokenizer run (the generator's --prompt-ids)
  j["prompt_ids"] = ids(o.prompt);
  j["n_new"] = generated.size();
  j["generated_ids"] = ids(generated);
  j["full_ids"] = ids(o.full);
  j["compute_dtype"] = "float32";
  j["decoding"] = "greedy";
  j["transformers"] = "none: qrepack's reference pass";
  j["torch"] = "none";
  j["text"] = nullptr;
  return j;
}

// make_glm53_tiny.py's ref.json without the fields only transformers can give (its version,
// hidden-state sums, cache shapes): teacher forcing over the prompt, the last prompt position's
// logits (all of them and the top 8, ties to the lower id), the greedy continuation.
Json glm53_document(const Oracle& o) {
  const std::uint64_t n = o.prompt.size(), vocab = o.tf_logits.cols;
  const float* last = o.tf_logits.row(n - 1);
  std::vector<std::uint32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0u);
  const std::uint64_t top = std::min<std::uint64_t>(8, vocab);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [last](std::uint32_t a, std::uint32_t b) {
                      return last[a] > last[b] || (last[a] == last[b] && a < b);
                    });
  Json top_ids = Json::array(), top_values = Json::array(), logits = Json::array();
  for (std::uint64_t i = 0; i < top; ++i) {
    top_ids.push_back(order[i]);
    top_values.push_back(static_cast<double>(last[order[i]]));
  }
  for (std::uint64_t v = 0; v < vocab; ++v) logits.push_back(static_cast<double>(last[v]));
  Json j;
  j["schema_version"] = 1;
  j["source"] = "qrepack reference forward pass (f32)";
  j["prompt_ids"] = ids(o.prompt);
  j["teacher_forcing_ids"] = ids(TokenIds(o.tf_pred.begin(), o.tf_pred.begin() + n));
  j["last_logits_top_ids"] = std::move(top_ids);
  j["last_logits_top_values"] = std::move(top_values);
  j["last_logits"] = std::move(logits);
  j["greedy_new_ids"] = ids(TokenIds(o.full.begin() + n, o.full.end()));
  return j;
}

// make_deepseek_v4_tiny.py's ref.json for one prompt, as its "compressed" case: teacher forcing
// over the whole sequence (prompt and continuation), the greedy continuation.
Json deepseek_v4_document(const Oracle& o) {
  const TokenIds fresh(o.full.begin() + static_cast<std::ptrdiff_t>(o.prompt.size()), o.full.end());
  Json c;
  c["prompt_ids"] = ids(o.prompt);
  c["teacher_forcing_ids"] = ids(TokenIds(o.tf_pred.begin(), o.tf_pred.end()));
  c["greedy_full_ids"] = ids(o.full);
  c["greedy_new_ids"] = ids(fresh);
  c["max_new_tokens"] = fresh.size();
  Json j;
  j["schema_version"] = 1;
  j["generator_version"] = "2";
  j["source"] = "qrepack reference forward pass (f32 with c/deepseek_v4.c's rounding)";
  j["prompt_ids_compressed"] = ids(o.prompt);
  j["cases"] = {{"compressed", std::move(c)}};
  return j;
}

}  // namespace

std::span<const OracleSchemaInfo> oracle_schemas() { return kSchemas; }

const OracleSchemaInfo& oracle_schema_for(const std::string& model_type) {
  OracleSchema s = OracleSchema::kGlm;
  if (model_type == "llama") s = OracleSchema::kLlama;
  if (model_type == "qwen3") s = OracleSchema::kQwen3;
  if (model_type == "olmoe") s = OracleSchema::kOlmoe;
  if (model_type == "kimi_k3" || model_type == "kimi_linear") s = OracleSchema::kKimiK3;
  if (model_type == "qwen3_moe" || model_type.starts_with("qwen3_5_moe")) {
    s = OracleSchema::kQwen36;
  }
  if (is_inkling_model_type(model_type)) s = OracleSchema::kInkling;
  if (is_glm53_model_type(model_type)) s = OracleSchema::kGlm53;
  if (is_qwen38_model_type(model_type)) s = OracleSchema::kQwen38;
  if (model_type == "deepseek_v41" || model_type == "deepseek_v41_text") {
    s = OracleSchema::kDeepseekV41;
  }
  if (model_type == "deepseek_v4") s = OracleSchema::kDeepseekV4;
  for (const OracleSchemaInfo& i : kSchemas) {
    if (i.schema == s) return i;
  }
  return kSchemas[0];
}

Result<std::string> oracle_document(OracleSchema schema, const Oracle& o,
                                    const OracleProvenance& p) {
  Json j;
  switch (schema) {
    case OracleSchema::kQwen38:
      return qwen38_reference_document(o, p);
    case OracleSchema::kGlm:
    case OracleSchema::kInkling:  // make_tiny_inkling.py writes make_glm_oracle.py's fields
    case OracleSchema::kKimiK3:
      return oracle_json(o);
    case OracleSchema::kLlama:
      return llama_document(o, p).dump(1) + "\n";
    case OracleSchema::kQwen3:
    case OracleSchema::kQwen36:
      j["prompt_ids"] = ids(o.prompt);
      j["full_ids"] = ids(o.full);
      j["mode"] = schema == OracleSchema::kQwen3 ? std::string("full") : p.mode;
      j["model"] = p.model;
      break;
    case OracleSchema::kOlmoe:
      j["prompt_ids"] = ids(o.prompt);
      j["full_ids"] = ids(o.full);
      break;
    case OracleSchema::kGlm53:
      j = glm53_document(o);
      break;
    case OracleSchema::kDeepseekV41: {
      j["model"] = p.model;
      j["seed"] = nullptr;  // no generator seed: the weights are the checkpoint's
      j["prompt_ids"] = ids(o.prompt);
      j["output_ids"] = ids(
          TokenIds(o.full.begin() + static_cast<std::ptrdiff_t>(o.prompt.size()), o.full.end()));
      j["full_ids"] = ids(o.full);
      return j.dump(2);  // write_text(json.dumps(..., indent=2)): no final newline
    }
    case OracleSchema::kDeepseekV4:
      return deepseek_v4_document(o).dump(2) + "\n";
  }
  return j.dump(2) + "\n";
}

}  // namespace qrepack
