// `qrepack oracle CKPT -o ref.json`: the reference predictions an engine scores itself against
// (greedy continuation and teacher-forced argmaxes, ref_glm.json's schema), and
// `qrepack eval SRC OUT`: how closely a conversion's predictions follow its source's.
#include "qrepack/model/oracle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/format.h"
#include "cli/model_cli.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::cli {
namespace {

constexpr std::uint64_t kMaxNewTokens = 4096;
constexpr std::uint64_t kMaxEvalTokens = std::uint64_t{1} << 20;

struct OracleCli {
  std::string checkpoint, out, prompt, logits, mode = "full", release;
  std::uint64_t new_tokens = 0;
  std::size_t threads = 0;
  bool progress = false;
};

Status run_oracle(const OracleCli& c, bool new_tokens_given) {
  OracleRequest r;
  r.checkpoint = c.checkpoint;
  if (!c.prompt.empty()) {
    QR_ASSIGN_OR_RETURN(given, parse_token_ids(c.prompt, "--prompt"));
    r.prompt = std::move(given);
  }
  if (new_tokens_given && (c.new_tokens == 0 || c.new_tokens > kMaxNewTokens)) {
    return Error(ErrorKind::kUsage,
                 fmt::format("--new-tokens must be between 1 and {}", kMaxNewTokens));
  }
  r.new_tokens = c.new_tokens;
  r.json_path = c.out;
  r.logits_path = c.logits;
  r.mode = c.mode;
  r.progress = c.progress;
  r.release = c.release;
  return write_oracle(r);
}

struct EvalCli {
  std::string source, ids;
  std::vector<std::string> outputs;
  std::uint64_t sequences = 8, length = 32, seed = 0;
  double min_top1 = -1, max_kl = -1;
  bool json = false, progress = false;
  std::size_t threads = 0;
};

Result<std::vector<TokenIds>> eval_inputs(const EvalCli& c, std::uint64_t vocab) {
  std::vector<TokenIds> seqs;
  if (!c.ids.empty()) {
    std::string_view rest = c.ids;
    while (!rest.empty()) {
      const std::size_t semi = rest.find(';');
      QR_ASSIGN_OR_RETURN(s, parse_token_ids(rest.substr(0, semi), "--ids"));
      seqs.push_back(std::move(s));
      if (semi == std::string_view::npos) break;
      rest.remove_prefix(semi + 1);
    }
  } else {
    if (c.sequences == 0 || c.length == 0) {
      return Error(ErrorKind::kUsage, "--sequences and --length must be positive");
    }
    if (c.sequences > kMaxEvalTokens || c.length > kMaxEvalTokens ||
        c.sequences * c.length > kMaxEvalTokens) {
      return Error(ErrorKind::kUsage,
                   fmt::format("--sequences x --length must be at most {}", kMaxEvalTokens));
    }
    seqs = eval_sequences(vocab, c.sequences, c.length, c.seed);
  }
  return seqs;
}

nlohmann::ordered_json report_json(const std::string& path, std::size_t sequences,
                                   const EvalReport& r) {
  nlohmann::ordered_json j;
  j["output"] = path;
  j["sequences"] = sequences;
  j["positions"] = r.positions;
  j["top1_agreement"] = r.top1_agreement;
  j["kl_mean"] = r.kl_mean;
  j["kl_max"] = r.kl_max;
  j["ce_source"] = r.ce_source;
  j["ce_output"] = r.ce_output;
  return j;
}

// The first gate `r` fails, naming the output, or ok.
Status gate(const EvalCli& c, const std::string& path, const EvalReport& r) {
  if (c.min_top1 >= 0 && r.top1_agreement < c.min_top1) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("top-1 agreement {:.4f} is below --min-top1 {}", r.top1_agreement,
                             c.min_top1))
        .in_file(path)
        .with_rule("eval.min_top1");
  }
  if (c.max_kl >= 0 && r.kl_mean > c.max_kl) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("mean KL {:.6f} exceeds --max-kl {}", r.kl_mean, c.max_kl))
        .in_file(path)
        .with_rule("eval.max_kl");
  }
  return ok_status();
}

Result<EvalReport> eval_one(const ForwardModel& src, const std::vector<Matrix>& ls,
                            const std::vector<TokenIds>& seqs, const std::string& path,
                            LayerProgress& line) {
  // A converted output carries the source's config.json; one without it borrows it.
  QR_ASSIGN_OR_RETURN(opened, open_forward_model(path, src.directory()));
  ForwardModel& out = *opened;
  if (src.vocab_size() != out.vocab_size() || src.hidden_size() != out.hidden_size() ||
      src.layer_count() != out.layer_count()) {
    return Error(ErrorKind::kParameterMismatch,
                 "its config.json describes a different model from the source's")
        .in_file(path);
  }
  line.attach(out, "eval " + path);
  QR_ASSIGN_OR_RETURN(lo, out.logits(seqs));
  line.finish();
  return compare_logits(ls, lo);
}

Status run_eval(const EvalCli& c) {
  QR_ASSIGN_OR_RETURN(opened, open_forward_model(c.source));
  ForwardModel& src = *opened;
  QR_ASSIGN_OR_RETURN(seqs, eval_inputs(c, src.vocab_size()));
  LayerProgress line(c.progress);
  line.attach(src, "eval " + c.source);
  QR_ASSIGN_OR_RETURN(ls, src.logits(seqs));
  line.finish();
  std::vector<EvalReport> reports;
  for (const std::string& path : c.outputs) {
    QR_ASSIGN_OR_RETURN(r, eval_one(src, ls, seqs, path, line));
    reports.push_back(r);
  }
  if (c.json) {
    if (reports.size() == 1) {
      fmt::print("{}\n", report_json(c.outputs[0], seqs.size(), reports[0]).dump(2));
    } else {
      nlohmann::ordered_json j;
      j["source"] = c.source;
      j["outputs"] = nlohmann::json::array();
      for (std::size_t i = 0; i < reports.size(); ++i) {
        j["outputs"].push_back(report_json(c.outputs[i], seqs.size(), reports[i]));
      }
      fmt::print("{}\n", j.dump(2));
    }
  } else {
    fmt::print("eval: {} sequences, {} teacher-forced positions, against {}\n", seqs.size(),
               reports.empty() ? 0 : reports[0].positions, c.source);
    Table t({"OUTPUT", "TOP1", "AGREE", "KL_MEAN", "KL_MAX", "CE_SRC", "CE_OUT"},
            {false, true, true, true, true, true, true});
    for (std::size_t i = 0; i < reports.size(); ++i) {
      const EvalReport& r = reports[i];
      const auto agree =
          static_cast<std::uint64_t>(r.top1_agreement * static_cast<double>(r.positions) + 0.5);
      t.add({c.outputs[i], fmt::format("{:.4f}", r.top1_agreement),
             fmt::format("{}/{}", agree, r.positions), fmt::format("{:.5f}", r.kl_mean),
             fmt::format("{:.4f}", r.kl_max), fmt::format("{:.4f}", r.ce_source),
             fmt::format("{:.4f}", r.ce_output)});
    }
    t.print(stdout);
    fmt::print(
        "TOP1: argmax agreement; KL(src || out) in nats per position; CE: cross-entropy "
        "of the source's argmax under each model\n");
  }
  for (std::size_t i = 0; i < reports.size(); ++i) QR_TRY(gate(c, c.outputs[i], reports[i]));
  return ok_status();
}

}  // namespace

// "ref_glm.json (c/colibri.c), ref_llama.json (c/llama.c), ...": the schema table's words.
std::string schema_list(std::string (*item)(const OracleSchemaInfo&)) {
  std::vector<std::string> out;
  for (const OracleSchemaInfo& s : oracle_schemas()) out.push_back(item(s));
  return fmt::format("{}", fmt::join(out, ", "));
}

Action add_oracle(CLI::App& sub) {
  auto c = std::make_shared<OracleCli>();
  sub.description(fmt::format(
      "Write reference next-token predictions in the schema of the runtime that loads the "
      "model: {}",
      schema_list(
          [](const OracleSchemaInfo& s) { return fmt::format("{} ({})", s.file, s.runtime); })));
  sub.add_option("CKPT", c->checkpoint,
                 "Checkpoint (GLM-MoE-DSA, DeepSeek-V3, Kimi-K2, Kimi K3, Llama, Qwen3, Qwen3-MoE, "
                 "OLMoE, Qwen3.5/3.6, Inkling, GLM-5.3-Flash)")
      ->required();
  sub.add_option(
         "-o,--out", c->out,
         fmt::format("Reference file to write in the runtime's schema ({}; replaced "
                     "atomically)",
                     schema_list([](const OracleSchemaInfo& s) { return std::string(s.file); })))
      ->required();
  sub.add_option("--prompt", c->prompt,
                 fmt::format("Comma-separated prompt ids (default: the schema's generator's: {})",
                             schema_list([](const OracleSchemaInfo& s) {
                               return fmt::format("{} {}", s.file, fmt::join(s.prompt, ","));
                             })));
  auto* nt =
      sub.add_option("--new-tokens", c->new_tokens,
                     fmt::format("Greedy tokens after the prompt (default: the generator's: {})",
                                 schema_list([](const OracleSchemaInfo& s) {
                                   return fmt::format("{} {}", s.file, s.new_tokens);
                                 })));
  sub.add_option("--mode", c->mode,
                 "ref_qwen36.json's mode: full, or attention_only (every linear_attention "
                 "layer the identity, make_qwen36_tiny.py's default)")
      ->capture_default_str();
  sub.add_option("--logits", c->logits,
                 "Also write the teacher-forced logits as a .npy file [positions x vocab] f32 (its "
                 "data: kimi_k3.c's K3_LOGITS layout)");
  sub.add_option("--release", c->release,
                 "The release directory an experts-only CKPT is read with (Qwen3.8's "
                 "colibri-qwen38-int4 overlay; a sidecar defaults to its parent)");
  add_threads_option(sub, c->threads);
  sub.add_flag("--progress", c->progress, "Show the layer progress line on any stderr");
  return [c, nt] {
    set_thread_count(c->threads);
    return run_oracle(*c, nt->count() > 0);
  };
}

Action add_eval(CLI::App& sub) {
  auto c = std::make_shared<EvalCli>();
  sub.add_option("SRC", c->source,
                 "Source checkpoint (the reference; a directory, hf:// or https:// URL)")
      ->required();
  sub.add_option("OUT", c->outputs, "Converted checkpoint(s), compared one by one")->required();
  sub.add_option("--sequences", c->sequences, "Deterministic random sequences")
      ->capture_default_str();
  sub.add_option("--length", c->length, "Tokens per sequence")->capture_default_str();
  sub.add_option("--seed", c->seed, "Seed of the sequences")->capture_default_str();
  sub.add_option("--ids", c->ids, "Given sequences instead: \"1,2,3;4,5,6\"");
  sub.add_option("--min-top1", c->min_top1, "Exit 1 when top-1 agreement is below this");
  sub.add_option("--max-kl", c->max_kl, "Exit 1 when the mean KL(src || out) exceeds this");
  sub.add_flag("--json", c->json, "Print the report as JSON");
  add_threads_option(sub, c->threads);
  sub.add_flag("--progress", c->progress, "Show the layer progress line on any stderr");
  return [c] {
    set_thread_count(c->threads);
    return run_eval(*c);
  };
}

}  // namespace qrepack::cli
