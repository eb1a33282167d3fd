#include "cli/model_cli.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>

#include "qrepack/core/checked.h"
#include "qrepack/io/byte_sink.h"
#include "qrepack/io/output_guard.h"
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

void LayerProgress::attach(GlmForward& model, std::string label) {
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

Status write_oracle(const std::string& path, const TokenIds& prompt, std::uint64_t new_tokens,
                    const std::string& json_path, const std::string& logits_path, bool progress,
                    const std::string& shown_json_path) {
  QR_ASSIGN_OR_RETURN(model, GlmForward::open(path));
  // Checked before the (possibly long) pass: neither file may replace an input.
  QR_TRY(ensure_output_file_is_not_input(json_path, model.input_files()));
  if (!logits_path.empty()) {
    QR_TRY(ensure_output_file_is_not_input(logits_path, model.input_files()));
  }
  model.set_cache_budget(kOracleCacheBytes);
  LayerProgress line(progress);
  line.attach(model, "oracle");
  QR_ASSIGN_OR_RETURN(o, compute_oracle(model, prompt, new_tokens));
  line.finish();
  QR_TRY(write_file_atomically(json_path, oracle_json(o)));
  if (!logits_path.empty()) QR_TRY(write_file_atomically(logits_path, npy_f32(o.tf_logits)));
  std::uint64_t agree = 0;
  for (std::size_t i = prompt.size() - 1; i + 1 < o.full.size(); ++i) {
    agree += o.tf_pred[i] == o.full[i + 1];
  }
  fmt::print("oracle: prompt [{}]\n", fmt::join(prompt, " "));
  fmt::print(
      "        greedy continuation [{}]\n",
      fmt::join(o.full.begin() + static_cast<std::ptrdiff_t>(prompt.size()), o.full.end(), " "));
  fmt::print("        teacher-forced argmax agrees with the continuation at {}/{} positions\n",
             agree, new_tokens);
  fmt::print("wrote {} ({} teacher-forced positions){}\n",
             shown_json_path.empty() ? json_path : shown_json_path, o.tf_pred.size(),
             logits_path.empty() ? "" : fmt::format(" and {}", logits_path));
  return ok_status();
}

}  // namespace qrepack::cli
