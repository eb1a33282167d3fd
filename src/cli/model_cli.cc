#include "cli/model_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/sha256.h"
#include "qrepack/core/checked.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/output_guard.h"
#include "qrepack/model/decoder_forward.h"
#include "qrepack/model/oracle.h"
#include "remote/paths.h"

namespace qrepack::cli {

namespace {
constexpr std::size_t kMaxIds = 65536;
constexpr std::uint64_t kOracleCacheBytes = std::uint64_t{4} << 30;
}  // namespace

Result<TokenIds> parse_token_ids(std::string_view text, std::string_view flag) {
  TokenIds ids;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto v = parse_decimal(item);
    if (!v || *v > 0xFFFFFFFFull) {
      return Error(ErrorKind::kUsage,
                   fmt::format("{} takes comma-separated token ids, got \"{}\"", flag, item));
    }
    if (ids.size() == kMaxIds) {
      return Error(ErrorKind::kUsage, fmt::format("{} takes at most {} ids", flag, kMaxIds));
    }
    ids.push_back(static_cast<std::uint32_t>(*v));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (ids.empty()) return Error(ErrorKind::kUsage, fmt::format("{} needs at least one id", flag));
  return ids;
}

LayerProgress::LayerProgress(bool always) : enabled_(always || ::isatty(STDERR_FILENO) == 1) {}
LayerProgress::~LayerProgress() { finish(); }

void LayerProgress::attach(ForwardModel& model, std::string label) {
  if (!enabled_) return;
  model.set_progress([this, label = std::move(label)](std::string_view what) {
    fmt::print(stderr, "\r\x1b[K{}: {}", label, what);
    std::fflush(stderr);
    dirty_ = true;
  });
}

void LayerProgress::finish() {
  if (dirty_) fmt::print(stderr, "\r\x1b[K");
  dirty_ = false;
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  QR_ASSIGN_OR_RETURN(sink, AtomicFileSink::create(path));
  QR_TRY(sink->write(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size())));
  QR_TRY(remote::verify_opened_files(true));  // no file from bytes that fail their hash
  return sink->commit();
}

namespace {

// (file name, sha256) of every safetensors file the model was read from, sorted by name.
Result<std::vector<std::pair<std::string, std::string>>> shard_hashes(const ForwardModel& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& f : m.input_files()) {
    if (!f.ends_with(".safetensors")) continue;
    // A hub's file: the SHA-256 it publishes (every byte read is checked against it).
    QR_ASSIGN_OR_RETURN(sha, remote::locate(f) ? remote::published_sha256(f) : sha256_file(f));
    out.emplace_back(std::filesystem::path(f).filename().string(), std::move(sha));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status set_mode(ForwardModel& model, const std::string& mode) {
  if (mode == "full") return ok_status();
  auto* d = dynamic_cast<DecoderForward*>(&model);
  const bool hybrid =
      d && std::find(d->config().linear_layer.begin(), d->config().linear_layer.end(), true) !=
               d->config().linear_layer.end();
  if (mode != "attention_only" || !hybrid) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--mode {}: \"full\", or \"attention_only\" for a model with "
                             "linear_attention layers (Qwen3.5 / 3.6)",
                             mode.substr(0, 32)));
  }
  d->set_attention_only(true);
  return ok_status();
}

}  // namespace

Status write_oracle(const OracleRequest& r) {
  QR_ASSIGN_OR_RETURN(opened, open_forward_model(r.checkpoint, r.release));
  ForwardModel& model = *opened;
  QR_TRY(set_mode(model, r.mode));
  const OracleSchemaInfo& schema = oracle_schema_for(model.model_type());
  const TokenIds prompt = r.prompt.empty() ? schema.prompt : r.prompt;
  const std::uint64_t new_tokens = r.new_tokens ? r.new_tokens : schema.new_tokens;
  const std::string json_path =
      r.json_path.empty() ? (std::filesystem::path(model.directory()) / schema.file).string()
                          : r.json_path;
  // Checked before the (possibly long) pass: neither file may replace an input.
  QR_TRY(ensure_output_file_is_not_input(json_path, model.input_files()));
  if (!r.logits_path.empty()) {
    QR_TRY(ensure_output_file_is_not_input(r.logits_path, model.input_files()));
  }
  OracleProvenance prov;
  prov.model = r.shown_checkpoint.empty() ? r.checkpoint : r.shown_checkpoint;
  prov.mode = r.mode;
  prov.config_dir = model.directory();
  if (schema.schema == OracleSchema::kLlama) {
    QR_ASSIGN_OR_RETURN(shards, shard_hashes(model));
    prov.shards = std::move(shards);
  }
  model.set_cache_budget(kOracleCacheBytes);
  LayerProgress line(r.progress);
  line.attach(model, "oracle");
  QR_ASSIGN_OR_RETURN(o, compute_oracle(model, prompt, new_tokens));
  line.finish();
  QR_ASSIGN_OR_RETURN(document, oracle_document(schema.schema, o, prov));
  QR_TRY(write_file_atomically(json_path, document));
  if (!r.logits_path.empty()) QR_TRY(write_file_atomically(r.logits_path, npy_f32(o.tf_logits)));
  std::uint64_t agree = 0;
  for (std::size_t i = prompt.size() - 1; i + 1 < o.full.size(); ++i) {
    agree += o.tf_pred[i] == o.full[i + 1];
  }
  const std::string shown = r.shown_checkpoint.empty()
                                ? json_path
                                : (std::filesystem::path(r.shown_checkpoint) /
                                   std::filesystem::path(json_path).filename())
                                      .string();
  fmt::print("oracle: {} ({}, for {}{})\n", schema.file, model.model_type(), schema.runtime,
             r.mode == "full" ? "" : ", mode " + r.mode);
  fmt::print("        prompt [{}]\n", fmt::join(prompt, " "));
  fmt::print(
      "        greedy continuation [{}]\n",
      fmt::join(o.full.begin() + static_cast<std::ptrdiff_t>(prompt.size()), o.full.end(), " "));
  fmt::print("        teacher-forced argmax agrees with the continuation at {}/{} positions\n",
             agree, new_tokens);
  fmt::print("wrote {} ({} teacher-forced positions){}\n", shown, o.tf_pred.size(),
             r.logits_path.empty() ? "" : fmt::format(" and {}", r.logits_path));
  return ok_status();
}

}  // namespace qrepack::cli
