// A remote file read as a ByteSource, every byte it hands out covered by the file's published
// SHA-256 with one download of the file:
//   - the file is cut into chunks (4 MiB; QREPACK_HTTP_CHUNK_KIB) fetched by range requests on a
//   shared pool of connections,
//     in file order, a few ahead of the furthest read; each chunk is hashed into the file's
//     SHA-256 as soon as every chunk before it has been, and kept in a bounded window (LRU)
//     for readers; when the last chunk is hashed the digest must equal the published one;
//   - a read of an evicted chunk fetches it again and remembers its digest; `finish` then
//     reads the file a second time to prove those chunks equal what was hashed (the plan
//     reads in source order, so this is rare and counted);
//   - reads that start in the first kHeadBytes (safetensors headers, `inspect`) are served
//     from one prefix fetch and exact side fetches, and checked against the stream when it
//     passes them: inspect never downloads a shard's data.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "qrepack/io/byte_source.h"
#include "remote/http.h"

namespace qrepack::remote {

/// What one file's stream did, for the remote line and the manifest.
struct RemoteFileStats {
  std::uint64_t chunks_refetched = 0;  ///< evicted chunks read again
  bool verified = false;               ///< the whole file hashed to its published SHA-256
};

class RemoteFile final : public ByteSource, public std::enable_shared_from_this<RemoteFile> {
 public:
  RemoteFile(std::shared_ptr<const HttpClient> http, std::string name, std::string url,
             std::uint64_t size, std::string sha256);
  ~RemoteFile() override;

  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return size_; }
  Status read_at(std::uint64_t offset, std::span<std::uint8_t> out) const override;
  const std::string& url() const { return url_; }
  const std::string& sha256() const { return sha256_; }

  /// Streams the rest of the file through the hash and checks it (and, after evictions, that
  /// re-read chunks match): kSourceHashMismatch naming the file when they do not.
  Status finish();
  /// Whether any data chunk has been read (not only the header area).
  bool data_read() const;
  RemoteFileStats stats() const;
  /// Drops hashed chunks no reader holds, down to `keep` (another file's stream started).
  void trim(std::size_t keep);

 private:
  struct Chunk;
  struct SideRead;
  friend class FetchPool;
  std::uint64_t chunk_count() const;
  std::uint64_t chunk_bytes(std::uint64_t k) const;
  Status read_head(std::uint64_t offset, std::span<std::uint8_t> out) const;
  Status read_chunks(std::uint64_t offset, std::span<std::uint8_t> out) const;
  bool stream_started() const;
  void schedule_locked() const;
  void enqueue_locked(std::uint64_t k) const;
  void fetch(std::uint64_t k) const;  ///< runs on a pool thread
  void hash_ready_locked(std::unique_lock<std::mutex>& lock) const;
  void hash_chunk(std::uint64_t k, const std::uint8_t* data) const;
  void finalize_locked() const;
  void evict_locked() const;
  std::optional<std::uint64_t> victim_locked() const;
  void drop_until_locked(std::uint64_t keep) const;
  Status second_pass();
  Status fetch_range(std::uint64_t offset, std::span<std::uint8_t> out) const;

  std::shared_ptr<const HttpClient> http_;
  std::string name_, url_;
  std::uint64_t size_;
  std::string sha256_;
  std::uint64_t chunk_;   ///< bytes per chunk (QREPACK_HTTP_CHUNK_KIB)
  std::uint64_t window_;  ///< chunks held: kWindowChunks, connections + 4, or kWindowBytes

  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  mutable std::vector<Chunk> chunks_;
  mutable std::uint64_t hashed_ = 0;         ///< chunks [0, hashed_) are in the digest
  mutable std::uint64_t scheduled_ = 0;      ///< chunks [0, scheduled_) were asked for once
  mutable std::uint64_t wanted_ = 0;         ///< one past the furthest chunk a reader asked for
  mutable std::uint64_t present_ = 0;        ///< chunks held in memory
  mutable std::vector<std::uint64_t> held_;  ///< their indices
  mutable std::uint64_t tick_ = 0;           ///< LRU clock
  mutable bool hashing_ = false;
  mutable bool finishing_ = false;
  mutable std::optional<Error> failed_;
  mutable std::unique_ptr<Sha256> digest_;
  mutable std::map<std::uint64_t, std::string> refetched_;  ///< chunk -> digest of the re-read
  std::size_t proved_ = 0;  ///< refetched_ entries the last second pass proved
  mutable std::vector<SideRead> side_;
  mutable std::vector<std::uint8_t> head_;
  mutable bool head_loaded_ = false;
  mutable std::mutex head_m_;
  mutable std::mutex landed_m_;
  mutable std::string landed_;  ///< where the last range was answered (CDN), for the next ones
  mutable RemoteFileStats stats_;
};

/// Smallest window (chunks) of a stream, and the prefix fetched for headers.
inline constexpr std::uint64_t kWindowChunks = 8;
/// Smallest window in bytes, whatever the chunk size (a conversion job reads a few MiB).
inline constexpr std::uint64_t kWindowBytes = 32ull << 20;
inline constexpr std::uint64_t kHeadBytes = 64ull << 10;

}  // namespace qrepack::remote
