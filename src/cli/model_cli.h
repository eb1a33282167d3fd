// What `oracle`, `eval` and `fixture --oracle` share: token-id lists from the command line,
// the forward pass's progress line, and writing a small file atomically.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"
#include "qrepack/model/glm_forward.h"

namespace qrepack::cli {

/// "3,14,159": comma-separated ids (at most 65536 of them), each a decimal below 2^32.
Result<TokenIds> parse_token_ids(std::string_view text, std::string_view flag);

/// A one-line "label: layer 3/8 (MoE)" status on stderr, rewritten in place; shown when stderr
/// is a terminal or `always`. Install with attach(); finish() ends the line.
class LayerProgress {
 public:
  explicit LayerProgress(bool always);
  ~LayerProgress();
  void attach(GlmForward& model, std::string label);
  void finish();

 private:
  bool enabled_;
  bool dirty_ = false;
};

/// Writes `bytes` to `path` atomically (temp file, fsync, rename).
Status write_file_atomically(const std::string& path, std::string_view bytes);

/// Computes the oracle of the checkpoint at `path` and writes ref_glm.json to `json_path`
/// (and the teacher-forced logits to `logits_path` when not empty); prints a summary naming
/// `shown_json_path` (default: json_path).
Status write_oracle(const std::string& path, const TokenIds& prompt, std::uint64_t new_tokens,
                    const std::string& json_path, const std::string& logits_path, bool progress,
                    const std::string& shown_json_path = "");

}  // namespace qrepack::cli
