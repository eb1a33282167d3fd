#include "qrepack/model/oracle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/forward_ops.h"
#include "qrepack/core/prng.h"

namespace qrepack {
namespace {

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* x, std::uint64_t n) {
  double m = -INFINITY;
  for (std::uint64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (std::uint64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  const double lse = m + std::log(s);
  std::vector<double> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

}  // namespace

const TokenIds& default_oracle_prompt() { return oracle_schema_for("glm_moe_dsa").prompt; }

Result<Oracle> compute_oracle(ForwardModel& model, const TokenIds& prompt,
                              std::uint64_t new_tokens) {
  Oracle o;
  o.prompt = prompt;
  QR_ASSIGN_OR_RETURN(cont, model.generate(prompt, new_tokens));
  o.full = prompt;
  o.full.insert(o.full.end(), cont.begin(), cont.end());
  QR_ASSIGN_OR_RETURN(l, model.logits({o.full}));
  o.tf_logits = std::move(l[0]);
  if (const std::vector<Matrix>* h = model.final_hidden(); h && h->size() == 1) {
    o.tf_hidden = (*h)[0];
  }
  for (std::uint64_t t = 0; t < o.tf_logits.rows; ++t) {
    o.tf_pred.push_back(model::argmax(std::span(o.tf_logits.row(t), o.tf_logits.cols)));
  }
  return o;
}

std::string oracle_json(const Oracle& o) {
  return fmt::format("{{\"prompt_ids\": [{}], \"full_ids\": [{}], \"tf_pred\": [{}]}}\n",
                     fmt::join(o.prompt, ", "), fmt::join(o.full, ", "),
                     fmt::join(o.tf_pred, ", "));
}

std::string npy_f32(const Matrix& m) {
  std::string header = fmt::format(
      "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", m.rows, m.cols);
  // Magic (6) + version (2) + length (2) + header + '\n', padded to a multiple of 64.
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  const std::size_t at = out.size();
  out.resize(at + m.v.size() * 4);
  std::memcpy(out.data() + at, m.v.data(), m.v.size() * 4);  // little-endian hosts only
  return out;
}

std::vector<TokenIds> eval_sequences(std::uint64_t vocab, std::uint64_t n, std::uint64_t length,
                                     std::uint64_t seed) {
  std::vector<TokenIds> out(n);
  for (std::uint64_t s = 0; s < n; ++s) {
    SplitMix64 rng(seed * 0x9E3779B97F4A7C15ull ^ (s + 1) * 0xD1B54A32D192ED03ull);
    for (std::uint64_t t = 0; t < length; ++t) {
      out[s].push_back(static_cast<std::uint32_t>(rng.next() % vocab));
    }
  }
  return out;
}

EvalReport compare_logits(const std::vector<Matrix>& source, const std::vector<Matrix>& output) {
  EvalReport r;
  std::uint64_t agree = 0;
  for (std::size_t s = 0; s < source.size(); ++s) {
    const Matrix &a = source[s], &b = output[s];
    for (std::uint64_t t = 0; t < a.rows; ++t) {
      const auto la = log_softmax(a.row(t), a.cols), lb = log_softmax(b.row(t), b.cols);
      const std::uint32_t ta = model::argmax(std::span(a.row(t), a.cols));
      const std::uint32_t tb = model::argmax(std::span(b.row(t), b.cols));
      agree += ta == tb;
      double kl = 0;
      for (std::uint64_t i = 0; i < a.cols; ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
      kl = std::max(kl, 0.0);
      r.kl_mean += kl;
      r.kl_max = std::max(r.kl_max, kl);
      r.ce_source -= la[ta];
      r.ce_output -= lb[ta];
      ++r.positions;
    }
  }
  if (r.positions > 0) {
    const double n = static_cast<double>(r.positions);
    r.top1_agreement = static_cast<double>(agree) / n;
    r.kl_mean /= n;
    r.ce_source /= n;
    r.ce_output /= n;
  }
  return r;
}

}  // namespace qrepack
