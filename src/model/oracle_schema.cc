// The runtimes' reference files, field for field as their upstream generators write them
// (json.dumps with the generator's indent; docs/model.md lists the sources).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "qrepack/model/inkling_forward.h"
#include "qrepack/model/oracle.h"

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
    // make_dsv41_tiny.py: a prompt of --prompt-len 12 drawn by torch.randint(0, 256) from a
    // generator seeded 20260911 (these ids, Debian torch 1.13), --max-new 8.
    {OracleSchema::kDeepseekV41,
     "ref.json",
     "c/deepseek_v41.c",
     {177, 108, 28, 250, 26, 4, 230, 64, 62, 183, 111, 196},
     8},
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
  if (model_type == "deepseek_v41" || model_type == "deepseek_v41_text") {
    s = OracleSchema::kDeepseekV41;
  }
  for (const OracleSchemaInfo& i : kSchemas) {
    if (i.schema == s) return i;
  }
  return kSchemas[0];
}

std::string oracle_document(OracleSchema schema, const Oracle& o, const OracleProvenance& p) {
  Json j;
  switch (schema) {
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
    case OracleSchema::kDeepseekV41: {
      j["model"] = p.model;
      j["seed"] = nullptr;  // no generator seed: the weights are the checkpoint's
      j["prompt_ids"] = ids(o.prompt);
      j["output_ids"] = ids(
          TokenIds(o.full.begin() + static_cast<std::ptrdiff_t>(o.prompt.size()), o.full.end()));
      j["full_ids"] = ids(o.full);
      return j.dump(2);  // write_text(json.dumps(..., indent=2)): no final newline
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace qrepack
