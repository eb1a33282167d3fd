// What `oracle`, `eval` and `fixture --oracle` need of a reference forward pass, whatever the
// architecture: GlmForward (GLM-MoE-DSA / DeepSeek-V3 / Kimi-K2, MLA), DecoderForward (Llama,
// Qwen3, Qwen3-MoE, OLMoE, the Qwen3.5 / 3.6 hybrid) and KimiK3Forward (Kimi K3).
// open_forward_model picks the pass from config.json's model_type.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/model_weights.h"

namespace qrepack {

/// Token ids of one sequence.
using TokenIds = std::vector<std::uint32_t>;

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  /// config.json's model_type (a container's flattened text config: its own).
  virtual const std::string& model_type() const = 0;
  virtual std::uint64_t vocab_size() const = 0;
  virtual std::uint64_t hidden_size() const = 0;
  virtual std::uint64_t layer_count() const = 0;
  /// Directory of the checkpoint (its config.json lives here).
  virtual const std::string& directory() const = 0;
  /// The checkpoint's files and its config.json (what an output must never replace).
  virtual std::vector<std::string> input_files() const = 0;
  /// Keeps decoded weights in memory up to this many bytes (greedy generation runs the whole
  /// model once per token); 0 (the default) keeps none.
  virtual void set_cache_budget(std::uint64_t bytes) = 0;
  /// Called with a short description of each layer as the pass reaches it.
  virtual void set_progress(std::function<void(std::string_view)> progress) = 0;
  /// Teacher-forced logits: for each sequence a [T x vocab] matrix, row t predicting token
  /// t + 1. Ids must be < vocab_size.
  virtual Result<std::vector<Matrix>> logits(const std::vector<TokenIds>& seqs) = 0;
  /// The hidden states lm_head read in the last logits() call, per sequence [T x hidden], for
  /// passes whose oracle schema records them (Qwen3.8's ref.json); nullptr otherwise.
  virtual const std::vector<Matrix>* final_hidden() const { return nullptr; }

  /// Greedy continuation: `n` more ids after `prompt` (argmax, first on ties).
  virtual Result<TokenIds> generate(const TokenIds& prompt, std::uint64_t n);
};

/// Opens the checkpoint at `path` with the forward pass of its config.json's model_type (or
/// `fallback_config_dir`'s config.json when the checkpoint has none). A model_type no pass
/// implements is refused by name (rule forward.support).
Result<std::unique_ptr<ForwardModel>> open_forward_model(
    const std::string& path, const std::string& fallback_config_dir = "");

}  // namespace qrepack
