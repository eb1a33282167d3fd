// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto: what the engine's meta files and model
// hubs record for a file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const std::uint8_t> bytes);
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void* ctx_;  ///< EVP_MD_CTX
};

/// SHA-256 of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(std::span<const std::uint8_t> bytes);

/// The git blob id of `content`: SHA-1 of "blob LEN\0" + content, 40 lowercase hex digits (what
/// a model hub's tree API lists as a non-LFS file's oid).
std::string git_blob_sha1(std::string_view content);

/// SHA-256 of the whole file at `path`, read in 4 MiB blocks.
Result<std::string> sha256_file(const std::string& path);

}  // namespace qrepack
