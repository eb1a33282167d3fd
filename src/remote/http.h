// HTTP(S) GETs for remote sources, on libcurl: one request at a time per thread (each thread
// keeps its own connection), redirects followed by hand so a token never leaves its origin,
// retries with backoff on 429/5xx, resets and stalls (resuming a range where it stopped), and
// every quantity a server sends bounded before use: header bytes, body length, Content-Range,
// redirect count, Retry-After. http:// is accepted for loopback hosts only (tests).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "qrepack/core/error.h"

namespace qrepack::remote {

/// Transport settings: defaults, overridden by QREPACK_HTTP_* environment variables
/// (docs/remote.md).
struct HttpSettings {
  int attempts = 6;          ///< QREPACK_HTTP_RETRIES: tries per request, first included
  int backoff_ms = 500;      ///< QREPACK_HTTP_BACKOFF_MS: first wait; doubles, capped 30 s
  int stall_seconds = 30;    ///< QREPACK_HTTP_STALL_SECONDS: no byte for this long = retry
  int connections = 4;       ///< QREPACK_HTTP_CONNECTIONS: range requests in flight
  int chunk_kib = 4096;      ///< QREPACK_HTTP_CHUNK_KIB: bytes per range request / 1024
  std::string token;         ///< bearer token, sent to `token_origin` only
  std::string token_origin;  ///< scheme://host:port the token belongs to
};

/// The settings from the environment (HF_TOKEN or the huggingface_hub token file for the
/// token; the caller sets token_origin).
Result<HttpSettings> settings_from_environment();

/// What a response said about the file behind it, redirects included.
struct HttpHead {
  std::uint64_t size = 0;     ///< X-Linked-Size, else Content-Length / Content-Range total
  std::string linked_sha256;  ///< X-Linked-Etag when it is 64 hex digits (lowercase)
};

/// Counters for progress lines and the manifest.
struct HttpCounters {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> bytes{0};  ///< body bytes received
  std::atomic<std::uint64_t> retries{0};
};

class HttpClient {
 public:
  explicit HttpClient(HttpSettings settings) : s_(std::move(settings)) {}
  const HttpSettings& settings() const { return s_; }
  HttpCounters& counters() const { return counters_; }

  /// A small resource whole (JSON, config files): at most `cap` bytes. 404 is kRemoteAccess
  /// with rule remote.not_found. `link` receives the response's Link header (API pages).
  Result<std::string> get_text(const std::string& url, std::uint64_t cap,
                               std::string* link = nullptr) const;
  /// The file's size and published hash, from a one-byte range GET (no body kept).
  Result<HttpHead> head(const std::string& url) const;
  /// Bytes [offset, offset + out.size()) of a file of `total` bytes into `out`, resumed where
  /// a reset stopped it. `landed` receives the URL that answered (after redirects), so later
  /// ranges can skip the hub's redirect.
  Status get_range(const std::string& url, std::uint64_t total, std::uint64_t offset,
                   std::span<std::uint8_t> out, std::string* landed = nullptr) const;

 private:
  HttpSettings s_;
  mutable HttpCounters counters_;
};

/// scheme://host:port of an absolute http(s) URL ("" when it is not one).
std::string url_origin(const std::string& url);
/// Whether `url` may be requested at all: https://, or http:// to a loopback host.
Status check_url_allowed(const std::string& url);

/// Caps on what a server may send (more in remote/hub_api.h).
inline constexpr int kMaxRedirects = 10;
inline constexpr int kMaxRetryAfterSeconds = 60;

}  // namespace qrepack::remote
