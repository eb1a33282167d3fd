// What `oracle`, `eval` and `fixture --oracle` share: token-id lists from the command line,
// the forward pass's progress line, and writing a small file atomically.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"
#include "qrepack/model/forward_model.h"

namespace qrepack::cli {

/// "3,14,159": comma-separated ids (at most 65536 of them), each a decimal below 2^32.
Result<TokenIds> parse_token_ids(std::string_view text, std::string_view flag);

/// A one-line "label: layer 3/8 (MoE)" status on stderr, rewritten in place; shown when stderr
/// is a terminal or `always`. Install with attach(); finish() ends the line.
class LayerProgress {
 public:
  explicit LayerProgress(bool always);
  ~LayerProgress();
  void attach(ForwardModel& model, std::string label);
  void finish();

 private:
  bool enabled_;
  bool dirty_ = false;
};

/// Writes `bytes` to `path` atomically (temp file, fsync, rename).
Status write_file_atomically(const std::string& path, std::string_view bytes);

/// What `oracle` and `fixture --oracle` ask for.
struct OracleRequest {
  std::string checkpoint;
  TokenIds prompt;               ///< empty: the schema's default
  std::uint64_t new_tokens = 0;  ///< 0: the schema's default
  std::string json_path;         ///< empty: the schema's file name in the checkpoint's directory
  std::string logits_path;       ///< also the teacher-forced logits (.npy) when not empty
  std::string mode = "full";     ///< ref_qwen36.json: "full" or "attention_only"
  bool progress = false;
  std::string shown_checkpoint;  ///< the checkpoint as named to the user (default: checkpoint)
  std::string release;           ///< the directory an experts-only checkpoint is read with
};

/// Computes the oracle of the checkpoint and writes it in its runtime's schema (oracle.h);
/// prints a summary.
Status write_oracle(const OracleRequest& r);

}  // namespace qrepack::cli
