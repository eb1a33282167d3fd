// The oracle an engine scores itself against (reference/colibri.md §2.2, §2.4) and the
// model-level comparison of a conversion with its source, both on the reference forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"
#include "qrepack/model/model_weights.h"

namespace qrepack {

/// The tiny GLM oracle's prompt (make_glm_oracle.py's).
const TokenIds& default_oracle_prompt();

struct Oracle {
  TokenIds prompt;
  TokenIds full;     ///< prompt + greedy continuation
  TokenIds tf_pred;  ///< argmax at each position of a teacher-forced pass over `full`
  Matrix tf_logits;  ///< that pass's logits [full.size() x vocab]
  Matrix tf_hidden;  ///< what lm_head read in that pass, when the pass exposes it (else empty)
};

/// Greedy continuation of `prompt` by `new_tokens`, then a teacher-forced pass over it.
Result<Oracle> compute_oracle(ForwardModel& model, const TokenIds& prompt,
                              std::uint64_t new_tokens);

/// ref_glm.json: {"prompt_ids": [...], "full_ids": [...], "tf_pred": [...]}, one line.
std::string oracle_json(const Oracle& o);

/// The reference file each runtime scores itself against, as its upstream generator writes it
/// (reference/colibri-engines.md §1.4, §1.6, §1.7, §1.9; docs/model.md):
///   kGlm     ref_glm.json     make_glm_oracle.py      {prompt_ids, full_ids, tf_pred}
///   kLlama   ref_llama.json   make_llama_oracle.py    13 fields (repo, revision, shards
///                                                     {file: sha256}, prompt, prompt_ids, n_new,
///                                                     generated_ids, full_ids, compute_dtype,
///                                                     decoding, transformers, torch, text)
///   kQwen3   ref.json         make_qwen3_tiny.py      {prompt_ids, full_ids, mode, model}
///   kQwen36  ref_qwen36.json  make_qwen36_tiny.py     {prompt_ids, full_ids, mode, model}
///   kOlmoe   ref_olmoe.json   make_olmoe_real_oracle  {prompt_ids, full_ids}
///   kInkling ref_inkling.json make_tiny_inkling.py    {prompt_ids, full_ids, tf_pred}
///   kKimiK3  ref_kimi_k3.json (none: c/kimi_k3.c reads no reference file; ref_glm.json's
///                             fields, its --ngen default of 32 tokens)
///   kGlm53   ref.json         make_glm53_tiny.py      {schema_version 1, source, prompt_ids,
///                                                     teacher_forcing_ids (over the prompt),
///                                                     last_logits_top_ids / _values (top 8),
///                                                     last_logits, greedy_new_ids (4)}, the
///                                                     fields glm53_tiny_harness.py reads
///   kQwen38  ref.json         make_qwen38_tiny.py     schema_version 2: prefill / decode
///                                                     logits and hidden SHA-256s, prompt_ids,
///                                                     full_ids, generated_ids, final_logits
///   kDeepseekV41 ref.json     make_dsv41_tiny.py      {model, seed, prompt_ids, output_ids,
///                                                     full_ids} (its spec / vision parts left
///                                                     out: DSpark and the ViT are not run)
///   kDeepseekV4  ref.json     make_deepseek_v4_tiny.py {schema_version 1, generator_version,
///                                                     source, prompt_ids_compressed, cases:
///                                                     {compressed: prompt_ids,
///                                                     teacher_forcing_ids, greedy_full_ids,
///                                                     greedy_new_ids, max_new_tokens}} (its
///                                                     short / long cases, seed, versions,
///                                                     quantization_format, config_summary
///                                                     left out: one prompt, no transformers)
/// Every runtime reads prompt_ids and full_ids and generates greedily from the prompt.
enum class OracleSchema : std::uint8_t {
  kGlm,
  kLlama,
  kQwen3,
  kQwen36,
  kOlmoe,
  kInkling,
  kKimiK3,
  kGlm53,
  kQwen38,
  kDeepseekV41,
  kDeepseekV4
};

struct OracleSchemaInfo {
  OracleSchema schema;
  const char* file;          ///< default file name
  const char* runtime;       ///< the runtime that reads it
  TokenIds prompt;           ///< the generator's default prompt ids
  std::uint64_t new_tokens;  ///< the generator's default continuation length
};

/// Every schema, in OracleSchema order.
std::span<const OracleSchemaInfo> oracle_schemas();

/// The schema of a model_type's runtime (GLM's for the MLA families).
const OracleSchemaInfo& oracle_schema_for(const std::string& model_type);

/// What the richer schemas record besides the ids.
struct OracleProvenance {
  std::string model;                                        ///< the checkpoint as named to the user
  std::vector<std::pair<std::string, std::string>> shards;  ///< (file name, sha256), sorted
  std::string mode = "full";  ///< ref_qwen36.json: "full" or "attention_only"
  std::string config_dir;     ///< ref.json schema 2: where its config_summary is read
};

/// The reference document of `schema` for `o`.
Result<std::string> oracle_document(OracleSchema schema, const Oracle& o,
                                    const OracleProvenance& p);

/// `m` as a NumPy .npy file body (version 1.0, '<f4', C order, shape [rows, cols]).
std::string npy_f32(const Matrix& m);

/// The deterministic evaluation sequences: `n` of `length` ids uniform in [0, vocab), drawn
/// from SplitMix64(seed, sequence).
std::vector<TokenIds> eval_sequences(std::uint64_t vocab, std::uint64_t n, std::uint64_t length,
                                     std::uint64_t seed);

struct EvalReport {
  std::uint64_t positions = 0;
  double top1_agreement = 0;       ///< fraction of positions where both argmaxes agree
  double kl_mean = 0, kl_max = 0;  ///< KL(source || output) in nats per position
  double ce_source = 0;            ///< mean -log p_source(source argmax)
  double ce_output = 0;            ///< mean -log p_output(source argmax)
};

/// Compares two sets of logits for the same sequences.
EvalReport compare_logits(const std::vector<Matrix>& source, const std::vector<Matrix>& output);

}  // namespace qrepack
