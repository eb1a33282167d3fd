// What every reference forward pass shares: the weights read through a bounded cache, the
// batch of sequences as the rows of one matrix, the embedding lookup and the vocabulary
// projection read in row blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"
#include "qrepack/model/model_weights.h"

namespace qrepack::model {

/// Decoded weights, kept while they fit the budget (greedy generation runs the whole model
/// once per token).
class WeightCache {
 public:
  explicit WeightCache(ModelWeights w) : w_(std::move(w)) {}
  const ModelWeights& weights() const { return w_; }
  void set_budget(std::uint64_t bytes) { budget_ = bytes; }

  /// Rows [row0, row0 + n) of a [rows, cols] weight.
  Result<std::shared_ptr<const Matrix>> get(const std::string& name, std::uint64_t rows,
                                            std::uint64_t cols, std::uint64_t row0,
                                            std::uint64_t n);
  Result<std::shared_ptr<const Matrix>> get(const std::string& name, std::uint64_t rows,
                                            std::uint64_t cols) {
    return get(name, rows, cols, 0, rows);
  }
  Result<std::shared_ptr<const Matrix>> vec(const std::string& name, std::uint64_t n) {
    return get(name, 1, n);
  }
  /// Keeps `m` under `key` when it fits the budget; returns it either way.
  std::shared_ptr<const Matrix> keep(const std::string& key, Matrix m);
  std::shared_ptr<const Matrix> find(const std::string& key) const;

 private:
  ModelWeights w_;
  std::uint64_t budget_ = 0, used_ = 0;
  std::unordered_map<std::string, std::shared_ptr<const Matrix>> cache_;
};

/// All sequences' tokens as the rows of one matrix; sequence s is rows [start[s], start[s+1]).
struct Batch {
  std::vector<std::uint64_t> start;
  std::vector<std::uint32_t> ids;
  std::uint64_t tokens() const { return ids.size(); }
  std::uint64_t sequences() const { return start.size() - 1; }
  std::uint64_t longest() const;
};

/// The batch of `seqs`: each non-empty, every id below `vocab`.
Result<Batch> make_batch(const std::vector<TokenIds>& seqs, std::uint64_t vocab);

/// The rows of `name` ([vocab, d]) for every token of the batch.
Result<Matrix> embed_tokens(const ModelWeights& w, const std::string& name, std::uint64_t vocab,
                            std::uint64_t d, const Batch& b);

/// Where a pass reads config.json: beside the weights when it is there, else
/// `fallback_config_dir`; refused (naming `path`) when neither is given.
Result<std::string> config_dir_of(const ModelWeights& w, const std::string& path,
                                  const std::string& fallback_config_dir);

/// The files a pass reads: the weights' files and the config.json beside them.
std::vector<std::string> pass_input_files(const ModelWeights& w);

/// The vocabulary projection's weight: lm_head.weight, or `embed` when the embeddings are
/// tied and the checkpoint holds no lm_head.
std::string head_weight_name(const ModelWeights& w, bool tied, const std::string& embed);

/// Rows [r0, r0 + n) of a vocabulary projection.
using RowBlock =
    std::function<Result<std::shared_ptr<const Matrix>>(std::uint64_t r0, std::uint64_t n)>;

/// Per sequence, h's rows times the [vocab, d] projection whose row blocks `block` gives: the
/// logits, the projection read a block of rows at a time.
Result<std::vector<Matrix>> vocab_logits(const RowBlock& block, std::uint64_t vocab,
                                         const Matrix& h, const Batch& b);

/// The same for the weight `name` read through `w`.
Result<std::vector<Matrix>> vocab_logits(WeightCache& w, const std::string& name,
                                         std::uint64_t vocab, const Matrix& h, const Batch& b);

/// Progress callback holder.
struct Progress {
  std::function<void(std::string_view)> fn;
  void say(const std::string& s) const {
    if (fn) fn(s);
  }
};

}  // namespace qrepack::model
