// `qrepack verify SRC OUT`: per-class error of a conversion, decoded as the engine decodes it.
#include "qrepack/verify/verify.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/format.h"

namespace qrepack::cli {
namespace {

struct VerifyCli {
  std::string source, output;
  bool json = false;
  double max_rel_err = -1;
};

std::string num(double v, const char* f) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format(fmt::runtime(f), v);
}

// verify SRC alone: every source weight decoded and checked, nothing compared.
Status run_scan(const VerifyCli& c) {
  QR_ASSIGN_OR_RETURN(rep, scan_source(c.source));
  std::string enc;
  for (const auto& [name, n] : rep.encodings) {
    enc += fmt::format("{}{} {}", enc.empty() ? "" : ", ", n, name);
  }
  if (c.json) {
    nlohmann::ordered_json j;
    j["weights"] = rep.weights;
    j["values"] = rep.values;
    j["encodings"] = rep.encodings;
    fmt::print("{}\n", j.dump(2));
    return ok_status();
  }
  fmt::print("decoded {} weights ({} values: {}): every scale and value is finite and valid\n",
             rep.weights, rep.values, enc);
  return ok_status();
}

Status run_verify(const VerifyCli& c) {
  if (c.output.empty()) return run_scan(c);
  QR_ASSIGN_OR_RETURN(rep, verify_conversion(c.source, c.output));
  std::map<std::string, ErrorStats> by_class, by_format;
  std::map<std::string, std::size_t> count_class, count_format;
  ErrorStats all;
  const TensorVerify* worst = nullptr;
  for (const auto& t : rep.tensors) {
    const std::string key = t.cls + " " + t.format;
    by_class[key].add(t.stats);
    ++count_class[key];
    by_format[t.format].add(t.stats);
    ++count_format[t.format];
    all.add(t.stats);
    if (!worst || t.stats.rel_l2() > worst->stats.rel_l2()) worst = &t;
  }
  if (c.json) {
    nlohmann::ordered_json j;
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : rep.tensors) {
      j["tensors"].push_back({{"name", t.name},
                              {"class", t.cls},
                              {"format", t.format},
                              {"rel_l2", t.stats.rel_l2()},
                              {"max_abs", t.stats.max_abs},
                              {"cosine", t.stats.cosine()},
                              {"snr_db", t.stats.snr_db()}});
    }
    for (const auto& [k, s] : by_class) {
      j["classes"][k] = {{"tensors", count_class[k]},
                         {"rel_l2", s.rel_l2()},
                         {"max_abs", s.max_abs},
                         {"cosine", s.cosine()},
                         {"snr_db", s.snr_db()}};
    }
    j["summary"] = {{"tensors", rep.tensors.size()},
                    {"rel_l2", all.rel_l2()},
                    {"cosine", all.cosine()},
                    {"snr_db", all.snr_db()},
                    {"not_in_output", rep.not_in_output}};
    fmt::print("{}\n", j.dump(2));
  } else {
    Table t({"CLASS FORMAT", "TENSORS", "REL_L2", "MAX_ABS", "COSINE", "SNR_DB"},
            {false, true, true, true, true, true});
    for (const auto& [k, s] : by_class) {
      t.add({k, fmt::format("{}", count_class[k]), num(s.rel_l2(), "{:.5f}"),
             num(s.max_abs, "{:.3g}"), num(s.cosine(), "{:.6f}"), num(s.snr_db(), "{:.2f}")});
    }
    t.add({"all", fmt::format("{}", rep.tensors.size()), num(all.rel_l2(), "{:.5f}"),
           num(all.max_abs, "{:.3g}"), num(all.cosine(), "{:.6f}"), num(all.snr_db(), "{:.2f}")});
    t.print(stdout);
    if (rep.not_in_output)
      fmt::print("{} source weights are not in the output (dropped)\n", rep.not_in_output);
    const auto row = by_format.find("int4-row");
    for (const auto& [f, s] : by_format) {
      if (row != by_format.end() && f.starts_with("int4-g") && row->second.rel_l2() > 0) {
        fmt::print("{} / int4-row relative L2 error ratio: {:.3f}\n", f,
                   s.rel_l2() / row->second.rel_l2());
      }
    }
  }
  if (c.max_rel_err >= 0 && worst && worst->stats.rel_l2() > c.max_rel_err) {
    return Error(ErrorKind::kVerificationFailed,
                 fmt::format("relative L2 error {:.5f} exceeds --max-rel-err {}",
                             worst->stats.rel_l2(), c.max_rel_err))
        .in_tensor(worst->name)
        .with_rule("verify.max_rel_err");
  }
  return ok_status();
}

}  // namespace

Action add_verify(CLI::App& sub) {
  auto c = std::make_shared<VerifyCli>();
  sub.add_option("SRC", c->source, "The source checkpoint (a directory, hf:// or https:// URL)")
      ->required();
  sub.add_option("OUT", c->output,
                 "The converted checkpoint; without it, every source weight is decoded and its "
                 "scales and values checked (nothing is compared)");
  sub.add_flag("--json", c->json, "Machine-readable output on stdout");
  sub.add_option("--max-rel-err", c->max_rel_err,
                 "Gate: exit 1 when any tensor's relative L2 error exceeds this");
  return [c] { return run_verify(*c); };
}

}  // namespace qrepack::cli
