// The oracle an engine scores itself against (reference/colibri.md §2.2, §2.4) and the
// model-level comparison of a conversion with its source, both on the reference forward pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/glm_forward.h"

namespace qrepack {

/// The tiny GLM oracle's prompt (make_glm_oracle.py's).
const TokenIds& default_oracle_prompt();

struct Oracle {
  TokenIds prompt;
  TokenIds full;     ///< prompt + greedy continuation
  TokenIds tf_pred;  ///< argmax at each position of a teacher-forced pass over `full`
  Matrix tf_logits;  ///< that pass's logits [full.size() x vocab]
};

/// Greedy continuation of `prompt` by `new_tokens`, then a teacher-forced pass over it.
Result<Oracle> compute_oracle(GlmForward& model, const TokenIds& prompt, std::uint64_t new_tokens);

/// ref_glm.json: {"prompt_ids": [...], "full_ids": [...], "tf_pred": [...]}, one line.
std::string oracle_json(const Oracle& o);

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
