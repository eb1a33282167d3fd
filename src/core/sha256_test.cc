#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace qrepack {
namespace {

std::string digest(const std::string& s) {
  Sha256 h;
  h.update(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
  return h.hex();
}

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf" and the one-block/two-block messages).
TEST(Sha256, NistExamples) {
  EXPECT_EQ(digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FileMatchesStreamedDigest) {
  const std::string path = ::testing::TempDir() + "/sha256_test.bin";
  std::string data(5 << 20, 'a');  // over one 4 MiB read block
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  auto d = sha256_file(path);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, digest(data));
  EXPECT_FALSE(sha256_file(path + ".missing").ok());
}

}  // namespace
}  // namespace qrepack
