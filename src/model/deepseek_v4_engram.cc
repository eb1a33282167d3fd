#include "model/deepseek_v4_engram.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "model/forward_ops.h"

namespace qrepack::model {
namespace {

using Json = nlohmann::json;

constexpr std::uint64_t kMaxNgram = 8, kMaxHeads = 16, kMaxSidecarBytes = 32u << 20;

Error sidecar_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("forward.config");
}

bool uint_of(const Json& v, std::uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<std::uint64_t>();
    return true;
  }
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// A JSON array of `n` non-negative integers (decimal strings allowed when `strings`).
bool uint_row(const Json& a, std::uint64_t n, bool strings, std::vector<std::uint64_t>& out) {
  if (!a.is_array() || a.size() != n) return false;
  for (const Json& v : a) {
    std::uint64_t x = 0;
    if ((v.is_string() && !strings) || !uint_of(v, x)) return false;
    out.push_back(x);
  }
  return true;
}

Status read_table(const Json& j, std::uint64_t k, DsEngram& e, DsEngramTable& t) {
  const Json& primes = j["primes"][k];
  if (!primes.is_array() || primes.size() != e.max_ngram - 1) {
    return sidecar_error(fmt::format("primes[{}] must hold max_ngram_size - 1 rows", k));
  }
  for (const Json& row : primes) {
    if (!uint_row(row, e.heads, false, t.primes)) {
      return sidecar_error(fmt::format("primes[{}] rows must hold n_heads integers", k));
    }
  }
  if (!uint_row(j["offsets"][k], e.cols(), false, t.offsets) ||
      !uint_row(j["multipliers"][k], e.max_ngram, true, t.multipliers) ||
      !j["multipliers"][k][0].is_string()) {
    return sidecar_error(
        fmt::format("offsets[{}] must hold {} integers and multipliers[{}] {} decimal strings", k,
                    e.cols(), k, e.max_ngram));
  }
  for (std::uint64_t i = 0; i < e.cols(); ++i) {
    if (t.primes[i] == 0 || t.primes[i] > t.rows || t.offsets[i] > t.rows - t.primes[i]) {
      return sidecar_error(
          fmt::format("table {}: column {}'s rows [{}, {} + {}) fall outside num_embeddings {}", k,
                      i, t.offsets[i], t.offsets[i], t.primes[i], t.rows));
    }
  }
  return ok_status();
}

}  // namespace

Result<DsEngram> load_dsv41_engram(const std::string& dir, const std::vector<std::uint64_t>& ids,
                                   std::uint64_t vocab, std::uint64_t layers) {
  const std::string p = (std::filesystem::path(dir) / "dsv41_engram.json").string();
  if (path_kind(p) == PathKind::kMissing) {
    return Error(ErrorKind::kUnsupportedModel,
                 fmt::format("{} is missing: config.json names engram layers and the pass needs "
                             "the hash tables prepare_dsv41.py writes beside it",
                             p))
        .with_rule("forward.support");
  }
  QR_ASSIGN_OR_RETURN(body, read_small_file(p, kMaxSidecarBytes, ErrorKind::kInvalidConfig));
  auto parsed = parse_json_strict(body, ErrorKind::kInvalidConfig);
  if (!parsed.ok()) return std::move(parsed.error().in_file(p));
  const Json& j = *parsed;
  auto in_file = [&](Error e) { return std::move(e.in_file(p)); };
  DsEngram e;
  std::vector<std::uint64_t> layer_ids, rows;
  const std::uint64_t n = ids.size();
  if (!j.is_object() || !uint_of(j.value("max_ngram_size", Json()), e.max_ngram) ||
      !uint_of(j.value("n_heads", Json()), e.heads) ||
      !uint_of(j.value("head_dim", Json()), e.head_dim) ||
      !uint_of(j.value("pad_id", Json()), e.pad_id) ||
      !uint_row(j.value("layer_ids", Json()), n, false, layer_ids) ||
      !uint_row(j.value("num_embeddings", Json()), n, false, rows) ||
      !uint_row(j.value("token_map", Json()), vocab, false, e.token_map) ||
      !j.value("primes", Json()).is_array() || j["primes"].size() != n ||
      !j.value("offsets", Json()).is_array() || j["offsets"].size() != n ||
      !j.value("multipliers", Json()).is_array() || j["multipliers"].size() != n) {
    return in_file(sidecar_error(fmt::format(
        "dsv41_engram.json must hold max_ngram_size, n_heads, head_dim, pad_id, and layer_ids, "
        "num_embeddings, primes, offsets, multipliers for the {} engram layers of config.json, "
        "and a token_map of vocab_size {} entries",
        n, vocab)));
  }
  if (layer_ids != ids || e.max_ngram < 2 || e.max_ngram > kMaxNgram || e.heads == 0 ||
      e.heads > kMaxHeads || e.head_dim == 0 || e.head_dim % 32 || e.head_dim > 4096) {
    return in_file(sidecar_error(fmt::format(
        "layer_ids must equal config.json's engram_layer_ids; max_ngram_size in [2, {}], "
        "n_heads in [1, {}], head_dim a positive multiple of 32",
        kMaxNgram, kMaxHeads)));
  }
  for (std::uint64_t k = 0; k < n; ++k) {
    DsEngramTable t;
    t.layer = ids[k];
    t.rows = rows[k];
    if (t.layer >= layers) return in_file(sidecar_error("an engram layer id past n_layers"));
    if (Status s = read_table(j, k, e, t); !s.ok()) return in_file(std::move(s.error()));
    e.tables.push_back(std::move(t));
  }
  return e;
}

std::vector<std::uint64_t> engram_row_ids(const DsEngram& e, const DsEngramTable& t,
                                          std::span<const std::uint32_t> ids) {
  const std::uint64_t n = ids.size(), cols = e.cols();
  std::vector<std::uint64_t> out(n * cols);
  std::vector<std::uint64_t> tokens(e.max_ngram);
  for (std::uint64_t pos = 0; pos < n; ++pos) {
    for (std::uint64_t shift = 0; shift < e.max_ngram; ++shift) {
      tokens[shift] = shift > pos ? e.pad_id : e.token_map[ids[pos - shift]];
    }
    // int64 arithmetic as torch does it: wrapping products, then XOR (unsigned wrap is the
    // same bit pattern).
    std::uint64_t rolling = tokens[0] * t.multipliers[0];
    std::uint64_t col = 0;
    for (std::uint64_t i = 1; i < e.max_ngram; ++i) {
      rolling ^= tokens[i] * t.multipliers[i];
      const auto value = static_cast<std::int64_t>(rolling);
      for (std::uint64_t h = 0; h < e.heads; ++h, ++col) {
        const auto prime = static_cast<std::int64_t>(t.primes[col]);
        std::int64_t bucket = value % prime;
        if (bucket < 0) bucket += prime;
        out[pos * cols + col] = static_cast<std::uint64_t>(bucket) + t.offsets[col];
      }
    }
  }
  return out;
}

Status apply_engram(WeightCache& w, const DsV4Config& c, const DsEngramTable& t, Matrix& h,
                    std::uint64_t r0, std::span<const std::uint32_t> ids) {
  const DsEngram& e = c.engram;
  const std::uint64_t n = ids.size(), cols = e.cols(), hd = e.head_dim, dim = c.dim, hc = c.hc;
  const std::string p = fmt::format("layers.{}.engram.", t.layer);
  const std::vector<std::uint64_t> row_ids = engram_row_ids(e, t, ids);
  Matrix rows{n, cols * hd, std::vector<float>(n * cols * hd)};
  for (std::uint64_t i = 0; i < n * cols; ++i) {
    // One table row at a time: the released tables are far too large to read whole.
    QR_ASSIGN_OR_RETURN(r, w.weights().read(p + "embed.weight", t.rows, hd, row_ids[i], 1));
    std::copy(r.v.begin(), r.v.end(), rows.v.begin() + static_cast<std::ptrdiff_t>(i * hd));
  }
  QR_ASSIGN_OR_RETURN(wkv, w.get(p + "wkv.weight", (hc + 1) * dim, cols * hd));
  QR_ASSIGN_OR_RETURN(qw, w.get(p + "q_weight", hc, dim));
  QR_ASSIGN_OR_RETURN(kw, w.get(p + "k_weight", hc, dim));
  const Matrix kv = matmul(rows, *wkv);
  for (std::uint64_t s = 0; s < n; ++s) {
    const float* value = kv.row(s) + hc * dim;
    for (std::uint64_t copy = 0; copy < hc; ++copy) {
      const float* key = kv.row(s) + copy * dim;
      float* x = h.row(r0 + s) + copy * dim;
      // Sums in double, as the runtime's engram_run takes them.
      double sx = 0, sk = 0, sd = 0;
      for (std::uint64_t i = 0; i < dim; ++i) {
        sx += static_cast<double>(x[i]) * x[i];
        sk += static_cast<double>(key[i]) * key[i];
        sd += static_cast<double>(x[i]) * qw->row(copy)[i] * kw->row(copy)[i] * key[i];
      }
      const float fd = static_cast<float>(dim);
      const float rstd =
          (1.0f / std::sqrt(static_cast<float>(sx / fd) + static_cast<float>(c.eps))) *
          (1.0f / std::sqrt(static_cast<float>(sk / fd) + static_cast<float>(c.eps)));
      const float scaled = static_cast<float>(sd) * rstd / std::sqrt(fd);
      const float root = std::sqrt(std::max(std::fabs(scaled), 1e-6f));
      const float gate = 1.0f / (1.0f + std::exp(-(scaled < 0 ? -root : root)));
      for (std::uint64_t i = 0; i < dim; ++i) x[i] += gate * value[i];
    }
  }
  return ok_status();
}

}  // namespace qrepack::model
