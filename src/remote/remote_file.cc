#include "remote/remote_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>

#include "remote/fetch_pool.h"

namespace qrepack::remote {

struct RemoteFile::Chunk {
  std::unique_ptr<std::uint8_t[]> data;
  std::uint64_t last_use = 0;
  std::uint32_t pins = 0;
  std::uint32_t waiters = 0;  ///< readers waiting for it: not evicted before they copy
  bool pending = false;
  bool read = false;  ///< copied by a reader since it arrived: evicted before unread ones
};

// Bytes fetched outside the stream (the header area): checked when the stream passes them.
struct RemoteFile::SideRead {
  std::uint64_t begin = 0, end = 0;
  std::string digest;              ///< of the bytes handed out
  std::unique_ptr<Sha256> stream;  ///< of the stream's bytes over [begin, end), so far
};

RemoteFile::RemoteFile(std::shared_ptr<const HttpClient> http, std::string name, std::string url,
                       std::uint64_t size, std::string sha256)
    : http_(std::move(http)),
      name_(std::move(name)),
      url_(std::move(url)),
      size_(size),
      sha256_(std::move(sha256)),
      chunk_(static_cast<std::uint64_t>(http_->settings().chunk_kib) << 10),
      window_(
          std::max({kWindowChunks, static_cast<std::uint64_t>(http_->settings().connections) + 4,
                    (kWindowBytes + chunk_ - 1) / chunk_})),
      chunks_(static_cast<std::size_t>(chunk_count())),
      digest_(std::make_unique<Sha256>()) {}

RemoteFile::~RemoteFile() = default;

std::uint64_t RemoteFile::chunk_count() const { return (size_ + chunk_ - 1) / chunk_; }

std::uint64_t RemoteFile::chunk_bytes(std::uint64_t k) const {
  return std::min(chunk_, size_ - k * chunk_);
}

Status RemoteFile::fetch_range(std::uint64_t offset, std::span<std::uint8_t> out) const {
  std::string target;
  {
    std::lock_guard lock(landed_m_);
    target = landed_;
  }
  if (!target.empty()) {
    std::string landed;
    Status st = http_->get_range(target, size_, offset, out, &landed);
    if (st.ok() || st.error().kind() != ErrorKind::kRemoteAccess) return st;
    // A signed CDN address expires: ask the hub again.
  }
  std::string landed;
  QR_TRY(http_->get_range(url_, size_, offset, out, &landed));
  std::lock_guard lock(landed_m_);
  landed_ = landed;
  return ok_status();
}

Status RemoteFile::read_at(std::uint64_t offset, std::span<std::uint8_t> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return Error(ErrorKind::kIoRead, fmt::format("read of [{}, {}) is past the end ({} bytes)",
                                                 offset, offset + out.size(), size_))
        .in_file(name_);
  }
  if (out.empty()) return ok_status();
  if (offset < kHeadBytes) return read_head(offset, out);
  return read_chunks(offset, out);
}

// The first kHeadBytes come from one fetch; what a read needs past them, before the stream
// has started, from an exact side fetch. Both are remembered and compared with the stream.
Status RemoteFile::read_head(std::uint64_t offset, std::span<std::uint8_t> out) const {
  std::unique_lock head_lock(head_m_);
  if (!head_loaded_) {
    std::vector<std::uint8_t> head(static_cast<std::size_t>(std::min(kHeadBytes, size_)));
    QR_TRY(fetch_range(0, head));
    std::lock_guard lock(m_);
    side_.push_back({0, head.size(), sha256_hex(head), std::make_unique<Sha256>()});
    head_ = std::move(head);
    head_loaded_ = true;
  }
  head_lock.unlock();  // head_ is never written again
  const std::uint64_t in_head = std::min<std::uint64_t>(out.size(), head_.size() - offset);
  if (in_head == out.size()) {
    std::memcpy(out.data(), head_.data() + offset, static_cast<std::size_t>(in_head));
    return ok_status();
  }
  if (stream_started()) return read_chunks(offset, out);
  std::memcpy(out.data(), head_.data() + offset, static_cast<std::size_t>(in_head));
  const auto rest = out.subspan(static_cast<std::size_t>(in_head));
  const std::uint64_t at = offset + in_head;
  QR_TRY(fetch_range(at, rest));
  std::unique_lock lock(m_);
  if (scheduled_ > 0) {  // it started meanwhile: these bytes could not be checked
    lock.unlock();
    return read_chunks(offset, out);
  }
  side_.push_back({at, at + rest.size(), sha256_hex(rest), std::make_unique<Sha256>()});
  return ok_status();
}

bool RemoteFile::stream_started() const {
  std::lock_guard lock(m_);
  return scheduled_ > 0;
}

void RemoteFile::enqueue_locked(std::uint64_t k) const {
  chunks_[k].pending = true;
  FetchPool::instance().submit({std::const_pointer_cast<RemoteFile>(shared_from_this()), k});
}

// Asks for the chunks after the last one asked, in order: up to `window_` past the last
// hashed one, and no further than a few past the furthest read (all of them when finishing).
void RemoteFile::schedule_locked() const {
  const std::uint64_t n = chunk_count();
  const std::uint64_t ahead = static_cast<std::uint64_t>(http_->settings().connections);
  const std::uint64_t target = finishing_ ? n : std::min(n, wanted_ + ahead);
  const std::uint64_t limit = std::min(target, hashed_ + window_);
  while (scheduled_ < limit) enqueue_locked(scheduled_++);
}

Status RemoteFile::read_chunks(std::uint64_t offset, std::span<std::uint8_t> out) const {
  const std::uint64_t k0 = offset / chunk_;
  const std::uint64_t k1 = (offset + out.size() - 1) / chunk_;
  FetchPool::instance().note_reading(this);
  std::unique_lock lock(m_);
  wanted_ = std::max(wanted_, k1 + 1);
  schedule_locked();
  for (std::uint64_t k = k0; k <= k1; ++k) {
    Chunk& c = chunks_[k];
    ++c.waiters;
    while (!c.data && !failed_) {
      if (!c.pending && k < scheduled_) {  // evicted after it was hashed: read it again
        ++stats_.chunks_refetched;
        refetched_.emplace(k, std::string());
        enqueue_locked(k);
      }
      cv_.wait(lock);
    }
    --c.waiters;
    if (failed_) return *failed_;
    ++c.pins;
    c.last_use = ++tick_;
    c.read = true;
    const std::uint64_t from = std::max(offset, k * chunk_);
    const std::uint64_t to = std::min(offset + out.size(), k * chunk_ + chunk_bytes(k));
    lock.unlock();
    std::memcpy(out.data() + (from - offset), c.data.get() + (from - k * chunk_),
                static_cast<std::size_t>(to - from));
    lock.lock();
    --c.pins;
  }
  evict_locked();
  return ok_status();
}

// Pool thread: fetches chunk k, stores it, and hashes every chunk that is now next in line.
void RemoteFile::fetch(std::uint64_t k) const {
  const std::uint64_t len = chunk_bytes(k);
  auto data = FetchPool::instance().take_buffer(chunk_);
  Status st = fetch_range(k * chunk_, std::span(data.get(), static_cast<std::size_t>(len)));
  // A chunk read again: its digest, for the second pass (computed before the lock is taken;
  // the chunk stays pending meanwhile, so no reader asks for it a third time).
  std::string again;
  if (st.ok()) {
    bool refetch = false;
    {
      std::lock_guard lock(m_);
      refetch = k < hashed_ && refetched_.count(k) != 0;
    }
    if (refetch) again = sha256_hex(std::span(data.get(), static_cast<std::size_t>(len)));
  }
  std::unique_lock lock(m_);
  Chunk& c = chunks_[k];
  c.pending = false;
  if (!st.ok() || c.data) {  // failed (or, defensively, a chunk already held: keep that one)
    if (!st.ok() && !failed_) failed_ = std::move(st).error();
    cv_.notify_all();
    lock.unlock();
    FetchPool::instance().give_buffer(std::move(data), chunk_);
    return;
  }
  if (!again.empty()) {
    std::string& d = refetched_[k];
    if (d.empty()) {
      d = std::move(again);
    } else if (d != again && !failed_) {
      failed_ = Error(ErrorKind::kSourceHashMismatch,
                      fmt::format("chunk {} came back with other bytes when read again", k))
                    .in_file(name_)
                    .with_rule("remote.consistent");
    }
  }
  c.data = std::move(data);
  c.last_use = ++tick_;
  c.read = false;
  held_.push_back(k);
  ++present_;
  hash_ready_locked(lock);
  evict_locked();
  schedule_locked();
  cv_.notify_all();
}

void RemoteFile::hash_chunk(std::uint64_t k, const std::uint8_t* data) const {
  const std::uint64_t begin = k * chunk_, end = begin + chunk_bytes(k);
  digest_->update(std::span(data, static_cast<std::size_t>(end - begin)));
  for (SideRead& s : side_) {
    if (s.end <= begin || s.begin >= end || !s.stream) continue;
    const std::uint64_t from = std::max(s.begin, begin), to = std::min(s.end, end);
    s.stream->update(std::span(data + (from - begin), static_cast<std::size_t>(to - from)));
  }
}

// Hashes chunks in order while the next one is present; one thread at a time, outside the
// lock (the chunk is pinned meanwhile).
void RemoteFile::hash_ready_locked(std::unique_lock<std::mutex>& lock) const {
  while (!hashing_ && !failed_ && hashed_ < chunk_count() && chunks_[hashed_].data) {
    hashing_ = true;
    const std::uint64_t k = hashed_;
    Chunk& c = chunks_[k];
    ++c.pins;
    lock.unlock();
    hash_chunk(k, c.data.get());
    lock.lock();
    --c.pins;
    hashing_ = false;
    ++hashed_;
    for (SideRead& s : side_) {
      if (s.stream && s.end <= hashed_ * chunk_ && s.stream->hex() != s.digest) {
        failed_ = Error(ErrorKind::kSourceHashMismatch,
                        fmt::format("bytes [{}, {}) differ between two reads of the file", s.begin,
                                    s.end))
                      .in_file(name_)
                      .with_rule("remote.consistent");
      }
      if (s.end <= hashed_ * chunk_) s.stream.reset();
    }
    if (hashed_ == chunk_count()) finalize_locked();
  }
}

void RemoteFile::finalize_locked() const {
  const std::string got = digest_->hex();
  if (got != sha256_ && !failed_) {
    failed_ = Error(ErrorKind::kSourceHashMismatch,
                    fmt::format("the file's bytes hash to sha256 {} but the server publishes {}",
                                got, sha256_))
                  .in_file(name_)
                  .with_rule("remote.sha256");
  }
  if (!failed_ && refetched_.empty()) stats_.verified = true;
}

// The chunk to drop (taken out of held_): hashed, not held or awaited by a reader; chunks
// already read before unread ones (a stream reads ahead of its readers), least recently used
// first. Scans only the chunks held (a window), whatever the file's chunk count.
std::optional<std::uint64_t> RemoteFile::victim_locked() const {
  std::optional<std::size_t> best;  // position in held_
  std::pair<bool, std::uint64_t> best_key{true, ~std::uint64_t{0}};
  for (std::size_t i = 0; i < held_.size(); ++i) {
    const Chunk& c = chunks_[held_[i]];
    if (held_[i] >= hashed_ || c.pins != 0 || c.waiters != 0) continue;
    const std::pair<bool, std::uint64_t> key{!c.read, c.last_use};
    if (!best || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  if (!best) return std::nullopt;
  const std::uint64_t k = held_[*best];
  held_[*best] = held_.back();
  held_.pop_back();
  return k;
}

void RemoteFile::drop_until_locked(std::uint64_t keep) const {
  while (present_ > keep) {
    const auto v = victim_locked();
    if (!v) return;
    FetchPool::instance().give_buffer(std::move(chunks_[*v].data), chunk_);
    --present_;
  }
}

void RemoteFile::evict_locked() const { drop_until_locked(window_); }

void RemoteFile::trim(std::size_t keep) {
  std::lock_guard lock(m_);
  drop_until_locked(keep);
}

bool RemoteFile::data_read() const {
  std::lock_guard lock(m_);
  return wanted_ > 0;
}

RemoteFileStats RemoteFile::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

Status RemoteFile::finish() {
  {
    std::unique_lock lock(m_);
    finishing_ = true;
    schedule_locked();
    cv_.wait(lock, [&] { return failed_ || hashed_ == chunk_count(); });
    if (failed_) return *failed_;
    if (chunk_count() == 0) finalize_locked();
    if (failed_) return *failed_;
    if (refetched_.size() == proved_) return ok_status();  // none read again since the last proof
  }
  return second_pass();
}

// Reads the file again, in order, to prove that the chunks read twice were the hashed ones.
Status RemoteFile::second_pass() {
  std::size_t proving = 0;
  {
    std::lock_guard lock(m_);
    proving = refetched_.size();
  }
  Sha256 whole;
  std::vector<std::uint8_t> buf(static_cast<std::size_t>(std::min(chunk_, size_)));
  for (std::uint64_t k = 0; k < chunk_count(); ++k) {
    const auto span = std::span(buf.data(), static_cast<std::size_t>(chunk_bytes(k)));
    QR_TRY(fetch_range(k * chunk_, span));
    whole.update(span);
    std::lock_guard lock(m_);
    const auto it = refetched_.find(k);
    if (it != refetched_.end() && !it->second.empty() && it->second != sha256_hex(span)) {
      return Error(ErrorKind::kSourceHashMismatch,
                   fmt::format("chunk {} read again differs from the verified file", k))
          .in_file(name_)
          .with_rule("remote.consistent");
    }
  }
  if (whole.hex() != sha256_) {
    return Error(ErrorKind::kSourceHashMismatch,
                 "the file's bytes changed between two reads: they no longer hash to the "
                 "published sha256")
        .in_file(name_)
        .with_rule("remote.sha256");
  }
  std::lock_guard lock(m_);
  stats_.verified = true;
  proved_ = proving;
  return ok_status();
}

}  // namespace qrepack::remote
