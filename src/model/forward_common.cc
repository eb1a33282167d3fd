#include "model/forward_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "io/fs_util.h"
#include "model/forward_ops.h"

namespace qrepack::model {
namespace {
constexpr std::uint64_t kVocabBlockRows = 4096;  // lm_head rows read at a time
}  // namespace

Result<std::shared_ptr<const Matrix>> WeightCache::get(const std::string& name, std::uint64_t rows,
                                                       std::uint64_t cols, std::uint64_t row0,
                                                       std::uint64_t n) {
  const std::string key = row0 == 0 && n == rows ? name : fmt::format("{}@{}", name, row0);
  if (auto p = find(key)) return p;
  QR_ASSIGN_OR_RETURN(m, w_.read(name, rows, cols, row0, n));
  return keep(key, std::move(m));
}

std::shared_ptr<const Matrix> WeightCache::keep(const std::string& key, Matrix m) {
  auto p = std::make_shared<const Matrix>(std::move(m));
  const std::uint64_t bytes = p->v.size() * sizeof(float);
  if (used_ + bytes <= budget_) {
    cache_.emplace(key, p);
    used_ += bytes;
  }
  return p;
}

std::shared_ptr<const Matrix> WeightCache::find(const std::string& key) const {
  const auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second;
}

std::uint64_t Batch::longest() const {
  std::uint64_t m = 0;
  for (std::uint64_t s = 0; s < sequences(); ++s) m = std::max(m, start[s + 1] - start[s]);
  return m;
}

Result<Batch> make_batch(const std::vector<TokenIds>& seqs, std::uint64_t vocab) {
  Batch b;
  b.start.push_back(0);
  for (const TokenIds& s : seqs) {
    if (s.empty()) return Error(ErrorKind::kInvalidArgument, "an empty token sequence");
    for (std::uint32_t id : s) {
      if (id >= vocab) {
        return Error(ErrorKind::kInvalidArgument,
                     fmt::format("token id {} is not below vocab_size {}", id, vocab));
      }
    }
    b.ids.insert(b.ids.end(), s.begin(), s.end());
    b.start.push_back(b.ids.size());
  }
  return b;
}

Result<Matrix> embed_tokens(const ModelWeights& w, const std::string& name, std::uint64_t vocab,
                            std::uint64_t d, const Batch& b) {
  Matrix h{b.tokens(), d, std::vector<float>(b.tokens() * d)};
  std::unordered_map<std::uint32_t, std::vector<float>> rows;
  for (std::uint64_t t = 0; t < b.tokens(); ++t) {
    auto it = rows.find(b.ids[t]);
    if (it == rows.end()) {
      QR_ASSIGN_OR_RETURN(r, w.read(name, vocab, d, b.ids[t], 1));
      it = rows.emplace(b.ids[t], std::move(r.v)).first;
    }
    std::copy(it->second.begin(), it->second.end(), h.row(t));
  }
  return h;
}

Result<std::string> config_dir_of(const ModelWeights& w, const std::string& path,
                                  const std::string& fallback_config_dir) {
  // path_kind, not std::filesystem: a remote repository's files are not local.
  if (path_kind((std::filesystem::path(w.directory()) / "config.json").string()) !=
      PathKind::kMissing) {
    return w.directory();
  }
  if (!fallback_config_dir.empty()) return fallback_config_dir;
  return Error(ErrorKind::kInvalidConfig,
               "no config.json beside the checkpoint: the forward pass needs the model's "
               "dimensions")
      .in_file(path);
}

std::vector<std::string> pass_input_files(const ModelWeights& w) {
  std::vector<std::string> f = w.files();
  f.push_back((std::filesystem::path(w.directory()) / "config.json").string());
  return f;
}

std::string head_weight_name(const ModelWeights& w, bool tied, const std::string& embed) {
  return tied && !w.has("lm_head.weight") ? embed : "lm_head.weight";
}

Result<std::vector<Matrix>> vocab_logits(WeightCache& w, const std::string& name,
                                         std::uint64_t vocab, const Matrix& h, const Batch& b) {
  const std::uint64_t d = h.cols;
  return vocab_logits(
      [&](std::uint64_t r0, std::uint64_t n) { return w.get(name, vocab, d, r0, n); }, vocab, h, b);
}

Result<std::vector<Matrix>> vocab_logits(const RowBlock& block, std::uint64_t vocab,
                                         const Matrix& h, const Batch& b) {
  std::vector<Matrix> out;
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t = b.start[s + 1] - b.start[s];
    out.push_back(Matrix{t, vocab, std::vector<float>(t * vocab)});
  }
  for (std::uint64_t r0 = 0; r0 < vocab; r0 += kVocabBlockRows) {
    const std::uint64_t rn = std::min(kVocabBlockRows, vocab - r0);
    QR_ASSIGN_OR_RETURN(wb, block(r0, rn));
    const Matrix y = matmul(h, *wb);
    for (std::uint64_t s = 0; s < b.sequences(); ++s) {
      for (std::uint64_t t = b.start[s]; t < b.start[s + 1]; ++t) {
        std::copy(y.row(t), y.row(t) + rn, out[s].row(t - b.start[s]) + r0);
      }
    }
  }
  return out;
}

}  // namespace qrepack::model
