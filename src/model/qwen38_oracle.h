// Qwen3.8-Flash-Next's ref.json, "schema_version" 2, field for field as make_qwen38_tiny.py
// (colibri @ 9b99a0b3) writes it with json.dumps(indent=2) + newline. The generator runs a
// prefill over the prompt, one decode step with its argmax, and a fixed-length greedy decode
// (through eos: the PLE history reset is exercised); its digests are SHA-256s of the tensors'
// bytes. Here every tensor is qrepack's f32 pass ("reference_dtype": "float32", which the
// generator also writes for its float32 int4 reference), so the digests hash f32
// little-endian bytes: prefill logits [1, S, vocab] and the final mixer's output
// [1, S, hidden] (what lm_head reads: transformers' last hidden state), decode the same of
// the one next position. The fields only a transformers run has (seed, transformers_version,
// cache_class) are null.
#pragma once

#include <string>

#include "qrepack/core/error.h"
#include "qrepack/model/oracle.h"

namespace qrepack {

/// The document for `o` (its tf_hidden filled; at least one generated token); the config
/// summary from `p.config_dir`'s config.json.
Result<std::string> qwen38_reference_document(const Oracle& o, const OracleProvenance& p);

}  // namespace qrepack
