#include "core/sha256.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace qrepack {

namespace {

std::string hex_of(const unsigned char* md, unsigned int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kDigits[md[i] >> 4];
    out[2 * i + 1] = kDigits[md[i] & 15];
  }
  return out;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    std::abort();  // allocation failure inside libcrypto: nothing sensible to return
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(std::span<const std::uint8_t> bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  return hex_of(md, n);
}

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string git_blob_sha1(std::string_view content) {
  const std::string prefix = fmt::format("blob {}", content.size());
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) != 1) std::abort();
  EVP_DigestUpdate(ctx, prefix.data(), prefix.size() + 1);  // the terminating NUL included
  EVP_DigestUpdate(ctx, content.data(), content.size());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  return hex_of(md, n);
}

Result<std::string> sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error(ErrorKind::kIoRead, fmt::format("cannot open: {}", std::strerror(errno)))
        .in_file(path);
  }
  Sha256 h;
  std::vector<std::uint8_t> buf(std::size_t{4} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Error(ErrorKind::kIoRead, fmt::format("read failed: {}", std::strerror(e)))
          .in_file(path);
    }
    if (n == 0) break;
    h.update(std::span(buf.data(), static_cast<std::size_t>(n)));
  }
  ::close(fd);
  return h.hex();
}

}  // namespace qrepack
