#include "remote/http.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "remote/hub_api.h"

namespace qrepack::remote {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One easy handle per thread: its connection cache keeps a connection alive between requests.
struct ThreadHandle {
  CURL* h = nullptr;
  ThreadHandle() {
    global_init();
    h = curl_easy_init();
  }
  ~ThreadHandle() {
    if (h) curl_easy_cleanup(h);
  }
};

CURL* thread_handle() {
  thread_local ThreadHandle t;
  return t.h;
}

enum class Sink : std::uint8_t { kText, kRange, kProbe };

// One request and its response: what the callbacks fill in.
struct Exchange {
  const std::string* url = nullptr;
  Sink sink = Sink::kText;
  std::uint64_t first = 0, last = 0;  ///< kRange: bytes asked (inclusive)
  std::uint64_t total = 0;            ///< kRange: the file's size
  std::string* text = nullptr;
  std::uint64_t cap = 0;  ///< kText: body cap
  std::span<std::uint8_t> out;
  std::uint64_t got = 0;  ///< body bytes accepted
  std::uint64_t header_bytes = 0;
  std::uint64_t discarded = 0;
  long status = 0;
  bool started = false;
  ResponseHeaders h;  ///< of the current response (a status line resets them)
  // Why a callback stopped the transfer (not retryable: the server's answer is refused).
  std::optional<Error> refused;
  // The stall guard (on_progress): when a byte last came from the server, how long none may.
  std::chrono::steady_clock::time_point last_byte;
  std::chrono::seconds stall{0};
  bool stalled = false;  ///< the guard stopped the transfer
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto& x = *static_cast<Exchange*>(user);
  const size_t len = size * n;
  x.last_byte = std::chrono::steady_clock::now();
  if (auto st = x.h.add_line(std::string_view(data, len)); !st.ok()) {
    x.refused = std::move(st).error();
    return 0;
  }
  return len;
}

// Checks the response once its body starts: anything refused stops the transfer.
std::optional<Error> check_body_start(Exchange& x, CURL* h) {
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.status);
  if (x.status < 200 || x.status >= 300) return std::nullopt;  // body discarded
  if (!x.h.content_encoding.empty() && x.h.content_encoding != "identity") {
    return Error(ErrorKind::kRemoteProtocol,
                 fmt::format("the server sent a Content-Encoding \"{}\" body: byte ranges need "
                             "the file's own bytes",
                             x.h.content_encoding.substr(0, 40)))
        .with_rule("remote.encoding");
  }
  if (x.sink != Sink::kRange) return std::nullopt;
  if (x.status == 206) {
    auto st = check_content_range(x.h.content_range, x.first, x.last, x.total);
    if (!st.ok()) return std::move(st).error();
    return std::nullopt;
  }
  if (x.first == 0 && x.last + 1 == x.total) return std::nullopt;  // whole file as a 200
  return Error(ErrorKind::kRemoteProtocol,
               fmt::format("asked for bytes {}-{} and the server answered {} without the range",
                           x.first, x.last, x.status))
      .with_rule("remote.range");
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto& x = *static_cast<Exchange*>(user);
  const size_t len = size * n;
  x.last_byte = std::chrono::steady_clock::now();
  if (!x.started) {
    x.started = true;
    x.refused = check_body_start(x, thread_handle());
    if (x.refused) return 0;
  }
  if (x.status < 200 || x.status >= 300) {  // an error page or a redirect's body
    x.discarded += len;
    return x.discarded > (1u << 20) ? 0 : len;
  }
  const std::uint64_t limit =
      x.sink == Sink::kRange ? x.out.size() : (x.sink == Sink::kText ? x.cap : 1);
  if (x.got + len > limit) {
    if (x.sink == Sink::kProbe) return 0;  // one byte was all a probe wanted
    x.refused = Error(ErrorKind::kRemoteProtocol,
                      x.sink == Sink::kRange
                          ? fmt::format("the server sent more than the {} bytes asked", limit)
                          : fmt::format("response body over the cap of {} bytes", limit))
                    .with_rule(x.sink == Sink::kRange ? "remote.body_length" : "remote.max_bytes");
    return 0;
  }
  if (x.sink == Sink::kRange) {
    std::copy(data, data + len, x.out.begin() + static_cast<std::ptrdiff_t>(x.got));
  } else if (x.sink == Sink::kText) {
    x.text->append(data, len);
  }
  x.got += len;
  return len;
}

// Stops the transfer when no byte has come for the stall time. libcurl calls it at least once a
// second while a transfer is idle, so it fires within a second of that time; libcurl's own
// low-speed check averages the rate over about five seconds and so fires that much later.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& x = *static_cast<Exchange*>(user);
  if (std::chrono::steady_clock::now() - x.last_byte < x.stall) return 0;
  x.stalled = true;
  return 1;
}

std::string user_agent() { return "qrepack (+remote sources; docs/remote.md)"; }

// Runs one request; the exchange records what came back.
CURLcode perform(const HttpSettings& s, Exchange& x, char* errbuf) {
  CURL* h = thread_handle();
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, x.url->c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(s.stall_seconds));
  x.stall = std::chrono::seconds(s.stall_seconds);
  x.last_byte = std::chrono::steady_clock::now();
  x.stalled = false;
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_USERAGENT, user_agent().c_str());
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L << 10);  // fewer, larger receives
  std::string range;
  if (x.sink != Sink::kText) {
    range = fmt::format("{}-{}", x.first, x.last);
    curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
  }
  curl_slist* headers = nullptr;
  std::string auth;
  if (!s.token.empty() && !s.token_origin.empty() && url_origin(*x.url) == s.token_origin) {
    auth = "Authorization: Bearer " + s.token;
    headers = curl_slist_append(headers, auth.c_str());
  }
  if (headers) curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  errbuf[0] = '\0';
  const CURLcode rc = curl_easy_perform(h);
  if (x.status == 0) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.status);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  return rc;
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

std::string resolve_location(const std::string& base, const std::string& location) {
  CURLU* u = curl_url();
  std::string out;
  if (curl_url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      curl_url_set(u, CURLUPART_URL, location.c_str(), 0) == CURLUE_OK) {
    char* s = nullptr;
    if (curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK) out = s;
    curl_free(s);
  }
  curl_url_cleanup(u);
  return out;
}

// The outcome of one request after its redirects: done, retry later, or fail.
struct Outcome {
  enum class Kind : std::uint8_t { kDone, kRetry, kFail } kind = Kind::kDone;
  std::optional<Error> error;  ///< kFail: the error; kRetry: what went wrong, for the last one
  int wait_ms = 0;             ///< kRetry: Retry-After, when the server sent one
  bool stalled = false;        ///< kRetry: the stall guard fired (progress or not, it counts)
};

Outcome classify(const Exchange& x, CURLcode rc, const char* errbuf) {
  if (x.refused) return {Outcome::Kind::kFail, x.refused, 0};
  if (x.stalled) {
    return {Outcome::Kind::kRetry,
            Error(ErrorKind::kRemoteFailed,
                  fmt::format("no byte from the server for {} s (QREPACK_HTTP_STALL_SECONDS)",
                              x.stall.count()))
                .with_rule("remote.stall"),
            0, true};
  }
  if (rc != CURLE_OK) {
    const std::string what =
        fmt::format("{} ({})", curl_easy_strerror(rc), std::string(errbuf).substr(0, 120));
    Error e(ErrorKind::kRemoteFailed, what);
    e.with_rule("remote.transport");
    if (!retryable_curl(rc)) {
      return {Outcome::Kind::kFail,
              Error(ErrorKind::kRemoteProtocol, what).with_rule("remote.transport"), 0};
    }
    return {Outcome::Kind::kRetry, e, 0, rc == CURLE_OPERATION_TIMEDOUT};
  }
  if (retryable_status(x.status)) {
    int wait = 0;
    if (const auto ra = parse_u64(x.h.retry_after)) {
      wait = static_cast<int>(std::min<std::uint64_t>(*ra, kMaxRetryAfterSeconds)) * 1000;
    }
    return {Outcome::Kind::kRetry,
            Error(ErrorKind::kRemoteFailed, fmt::format("HTTP {}", x.status))
                .with_rule("remote.status"),
            wait};
  }
  if (x.status == 401 || x.status == 403) {
    return {Outcome::Kind::kFail,
            Error(ErrorKind::kRemoteAccess,
                  fmt::format("HTTP {}: access denied (a private or gated repository needs "
                              "HF_TOKEN)",
                              x.status))
                .with_rule("remote.access"),
            0};
  }
  if (x.status == 404 || x.status == 410) {
    return {Outcome::Kind::kFail,
            Error(ErrorKind::kRemoteAccess, fmt::format("HTTP {}: not found", x.status))
                .with_rule("remote.not_found"),
            0};
  }
  if (x.status < 200 || x.status >= 300) {
    return {Outcome::Kind::kFail,
            Error(ErrorKind::kRemoteProtocol, fmt::format("unexpected HTTP {}", x.status))
                .with_rule("remote.status"),
            0};
  }
  return {};
}

// Follows redirects from `url` for one attempt. `x` is filled by the last hop; `url` ends as
// the last URL asked.
Outcome request_once(const HttpSettings& s, Exchange& x, std::string& url) {
  char errbuf[CURL_ERROR_SIZE];
  std::string linked_etag, linked_size;  // the first hop's that sent them: the hub's answer
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    if (auto allowed = check_url_allowed(url); !allowed.ok()) {
      return {Outcome::Kind::kFail, std::move(allowed).error(), 0};
    }
    Exchange fresh = x;  // same sink and range, nothing received
    fresh.url = &url;
    const CURLcode rc = perform(s, fresh, errbuf);
    const bool redirect = fresh.status >= 301 && fresh.status <= 308 && fresh.status != 304 &&
                          !fresh.refused && (rc == CURLE_OK || rc == CURLE_WRITE_ERROR);
    if (redirect && !fresh.h.location.empty()) {
      const std::string next = resolve_location(url, fresh.h.location);
      if (next.empty()) {
        return {
            Outcome::Kind::kFail,
            Error(ErrorKind::kRemoteProtocol, fmt::format("redirect to an unusable Location \"{}\"",
                                                          fresh.h.location.substr(0, 120)))
                .with_rule("remote.redirects"),
            0};
      }
      if (linked_etag.empty()) linked_etag = fresh.h.linked_etag;
      if (linked_size.empty()) linked_size = fresh.h.linked_size;
      url = next;
      continue;
    }
    x = std::move(fresh);
    if (x.h.linked_etag.empty()) x.h.linked_etag = linked_etag;
    if (x.h.linked_size.empty()) x.h.linked_size = linked_size;
    return classify(x, rc, errbuf);
  }
  return {Outcome::Kind::kFail,
          Error(ErrorKind::kRemoteProtocol,
                fmt::format("more than {} redirects (a redirect loop)", kMaxRedirects))
              .with_rule("remote.redirects"),
          0};
}

void sleep_backoff(const HttpSettings& s, int failures, int server_wait_ms) {
  int ms = s.backoff_ms;
  for (int i = 1; i < failures && ms < 30'000; ++i) ms *= 2;
  ms = std::min(ms, 30'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max(ms, server_wait_ms)));
}

Error out_of_retries(const Error& last, const std::string& url, int attempts) {
  Error e(last.kind(), fmt::format("{} after {} attempts", last.message(), attempts));
  e.with_rule(last.rule()).in_file(url);
  return e;
}

// Repeats `attempt` (which returns an Outcome) with backoff until done, failed, or out of
// tries; `progressed` tells whether the last try moved forward (a resumed range).
template <typename Attempt>
Status with_retries(const HttpSettings& s, HttpCounters& c, const std::string& url,
                    Attempt&& attempt) {
  int failures = 0;
  for (int tries = 0;; ++tries) {
    bool progressed = false;
    Outcome o = attempt(progressed);
    c.requests.fetch_add(1, std::memory_order_relaxed);
    if (o.kind == Outcome::Kind::kDone) return ok_status();
    if (o.kind == Outcome::Kind::kFail) return std::move(o.error->in_file(url));
    // A try that moved a range forward starts the count again, unless it ended in a stall:
    // a server that sends a little and then stalls every time must still run out of tries.
    failures = progressed && !o.stalled ? 1 : failures + 1;
    if (failures >= s.attempts || tries >= 16 * s.attempts) {
      return out_of_retries(*o.error, url, tries + 1);
    }
    c.retries.fetch_add(1, std::memory_order_relaxed);
    sleep_backoff(s, failures, o.wait_ms);
  }
}

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const auto n = parse_u64(v);
  if (!n || *n < static_cast<std::uint64_t>(lo) || *n > static_cast<std::uint64_t>(hi)) {
    return -1;
  }
  return static_cast<int>(*n);
}

Result<std::string> read_token_file() {
  std::string path;
  if (const char* p = std::getenv("HF_TOKEN_PATH"); p && *p) {
    path = p;
  } else if (const char* home = std::getenv("HF_HOME"); home && *home) {
    path = std::string(home) + "/token";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    path = std::string(h) + "/.cache/huggingface/token";
  } else {
    return std::string();
  }
  std::ifstream in(path);
  if (!in) return std::string();
  std::string token;
  std::getline(in, token);
  return trim_spaces(token).substr(0, 4096);
}

}  // namespace

std::string url_origin(const std::string& url) {
  CURLU* u = curl_url();
  std::string out;
  char *scheme = nullptr, *host = nullptr, *port = nullptr;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    out = lower_ascii(scheme) + "://" + lower_ascii(host) + ":" + port;
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return out;
}

Status check_url_allowed(const std::string& url) {
  const std::string origin = url_origin(url);
  if (origin.rfind("https://", 0) == 0) return ok_status();
  if (origin.rfind("http://", 0) == 0) {
    const std::string host = origin.substr(7, origin.rfind(':') - 7);
    if (host == "127.0.0.1" || host == "localhost" || host == "[::1]") return ok_status();
    return Error(ErrorKind::kRemoteProtocol,
                 "plain http:// is accepted for loopback hosts only (use https://)")
        .in_file(url.substr(0, 200))
        .with_rule("remote.https");
  }
  return Error(ErrorKind::kRemoteProtocol, "not an http(s) URL")
      .in_file(url.substr(0, 200))
      .with_rule("remote.scheme");
}

Result<HttpSettings> settings_from_environment() {
  HttpSettings s;
  const struct {
    const char* name;
    int* field;
    int lo, hi;
  } knobs[] = {{"QREPACK_HTTP_RETRIES", &s.attempts, 1, 100},
               {"QREPACK_HTTP_BACKOFF_MS", &s.backoff_ms, 0, 60'000},
               {"QREPACK_HTTP_STALL_SECONDS", &s.stall_seconds, 1, 3600},
               {"QREPACK_HTTP_CONNECTIONS", &s.connections, 1, 64},
               {"QREPACK_HTTP_CHUNK_KIB", &s.chunk_kib, 64, 65536}};
  for (const auto& k : knobs) {
    const int v = env_int(k.name, *k.field, k.lo, k.hi);
    if (v < 0) {
      return Error(ErrorKind::kInvalidArgument,
                   fmt::format("{} must be a whole number in [{}, {}]", k.name, k.lo, k.hi));
    }
    *k.field = v;
  }
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) {
    s.token = trim_spaces(t);
  } else {
    QR_ASSIGN_OR_RETURN(token, read_token_file());
    s.token = std::move(token);
  }
  return s;
}

Result<std::string> HttpClient::get_text(const std::string& url, std::uint64_t cap,
                                         std::string* link) const {
  std::string body;
  QR_TRY(with_retries(s_, counters_, url, [&](bool&) {
    body.clear();
    Exchange x;
    x.sink = Sink::kText;
    x.text = &body;
    x.cap = cap;
    std::string u = url;
    Outcome o = request_once(s_, x, u);
    counters_.bytes.fetch_add(x.got, std::memory_order_relaxed);
    if (link) *link = x.h.link.substr(0, 4096);
    return o;
  }));
  return body;
}

Result<HttpHead> HttpClient::head(const std::string& url) const {
  HttpHead h;
  QR_TRY(with_retries(s_, counters_, url, [&](bool&) {
    Exchange x;
    x.sink = Sink::kProbe;
    x.first = 0;
    x.last = 0;
    std::string u = url;
    Outcome o = request_once(s_, x, u);
    if (o.kind != Outcome::Kind::kDone) return o;
    const std::string linked = lower_ascii(unquote_etag(x.h.linked_etag));
    if (is_sha256_hex(linked)) h.linked_sha256 = linked;
    std::optional<std::uint64_t> size = parse_u64(x.h.linked_size);
    if (!size && x.status == 206) {
      const auto slash = x.h.content_range.rfind('/');
      if (slash != std::string::npos) size = parse_u64(x.h.content_range.substr(slash + 1));
    }
    if (!size && x.status == 200) size = parse_u64(x.h.content_length);
    if (!size) {
      return Outcome{Outcome::Kind::kFail,
                     Error(ErrorKind::kRemoteProtocol,
                           "the server gave no size (no X-Linked-Size, Content-Range total or "
                           "Content-Length)")
                         .with_rule("remote.size"),
                     0};
    }
    h.size = *size;
    return o;
  }));
  return h;
}

Status HttpClient::get_range(const std::string& url, std::uint64_t total, std::uint64_t offset,
                             std::span<std::uint8_t> out, std::string* landed) const {
  if (out.empty()) return ok_status();
  std::uint64_t done = 0;
  return with_retries(s_, counters_, url, [&](bool& progressed) {
    Exchange x;
    x.sink = Sink::kRange;
    x.first = offset + done;
    x.last = offset + out.size() - 1;
    x.total = total;
    x.out = out.subspan(static_cast<std::size_t>(done));
    std::string u = url;
    Outcome o = request_once(s_, x, u);
    counters_.bytes.fetch_add(x.got, std::memory_order_relaxed);
    if (landed) *landed = u;
    // Bytes that arrived before a reset are kept: the next try asks for the rest.
    if (x.status >= 200 && x.status < 300 && !x.refused) {
      done += x.got;
      progressed = x.got > 0;
    }
    if (o.kind == Outcome::Kind::kDone && done != out.size()) {
      return Outcome{Outcome::Kind::kRetry,
                     Error(ErrorKind::kRemoteFailed,
                           fmt::format("short body: {} of {} bytes", done, out.size()))
                         .with_rule("remote.short_body"),
                     0};
    }
    return o;
  });
}

}  // namespace qrepack::remote
