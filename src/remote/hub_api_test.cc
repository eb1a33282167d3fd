#include "remote/hub_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace qrepack::remote {
namespace {

const std::string kUrl = "https://hub.example/api/models/o/r/tree/c";
const std::string kSha = std::string(64, 'a');

TEST(HubApi, RevisionNeedsA40HexSha) {
  auto ok =
      parse_revision(R"({"id":"o/r","sha":"7c639cb32c34d0e39a4076ba6487bd13e786af21"})", kUrl);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "7c639cb32c34d0e39a4076ba6487bd13e786af21");
  for (const char* bad : {R"({"sha":"7C639CB32C34D0E39A4076BA6487BD13E786AF21"})", R"({"sha":1})",
                          R"([])", R"({"sha":"abc"})", R"({"sha":"x","sha":"y"})", "{"}) {
    auto r = parse_revision(bad, kUrl);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().file(), kUrl) << bad;  // a repeated key is kDuplicateKey, the rest
                                               // kRemoteProtocol: each names the answer's URL
  }
}

TEST(HubApi, TreePageKeepsTopLevelFilesWithTheirHashes) {
  const std::string page = R"([
    {"type":"file","path":"config.json","size":12,"oid":"0123456789012345678901234567890123456789"},
    {"type":"directory","path":"sub","oid":"0123456789012345678901234567890123456789"},
    {"type":"file","path":"sub/x.json","size":1,"oid":"0123456789012345678901234567890123456789"},
    {"type":"file","path":"model.safetensors","size":4096,"oid":"0123456789012345678901234567890123456789",
     "lfs":{"oid":")" + kSha +
                           R"(","size":4096,"pointerSize":134}}])";
  std::map<std::string, std::optional<FileInfo>> files;
  ASSERT_TRUE(parse_tree_page(page, kUrl, files).ok());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files["config.json"]->blob_sha1, "0123456789012345678901234567890123456789");
  EXPECT_TRUE(files["config.json"]->sha256.empty());
  EXPECT_EQ(files["model.safetensors"]->sha256, kSha);
  EXPECT_EQ(files["model.safetensors"]->size, 4096u);
  // The same page again: every name repeats.
  EXPECT_FALSE(parse_tree_page(page, kUrl, files).ok());
}

TEST(HubApi, TreePageRefusesWhatItCannotTrust) {
  const std::vector<std::string> cases = {
      R"({"type":"file"})",  // not an array
      R"([{"path":"a"}])",   // no type
      R"([{"type":"file","path":"a","oid":"0123456789012345678901234567890123456789"}])",
      R"([{"type":"file","path":"a","size":-1,"oid":"0123456789012345678901234567890123456789"}])",
      R"([{"type":"file","path":"a","size":1,"oid":"short"}])",
      R"([{"type":"file","path":"a","size":5000000000000000,"oid":"0123456789012345678901234567890123456789"}])",
      R"([{"type":"file","path":"a","size":4,"oid":"0123456789012345678901234567890123456789","lfs":{"oid":")" +
          kSha + R"(","size":5}}])",  // lfs size disagrees
  };
  for (const std::string& bad : cases) {
    std::map<std::string, std::optional<FileInfo>> files;
    const Status st = parse_tree_page(bad, kUrl, files);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().rule(), "remote.api") << bad;
  }
}

TEST(HubApi, NextLinkIsTheRelNextTarget) {
  EXPECT_EQ(next_link(R"(<https://h/api?cursor=x>; rel="next")"), "https://h/api?cursor=x");
  EXPECT_EQ(next_link(R"(<https://h/p>; rel="prev", <https://h/n>; rel="next")"), "https://h/n");
  EXPECT_EQ(next_link(R"(<https://h/p>; rel="prev")"), "");
  EXPECT_EQ(next_link(R"(rel="next")"), "");
  EXPECT_EQ(next_link(""), "");
}

TEST(HubApi, HeaderLinesResetPerResponseAndAreCapped) {
  ResponseHeaders h;
  ASSERT_TRUE(h.add_line("HTTP/1.1 302 Found\r\n").ok());
  ASSERT_TRUE(h.add_line("Location: https://cdn/x\r\n").ok());
  ASSERT_TRUE(h.add_line("x-linked-etag:  \"" + kSha + "\"\r\n").ok());
  EXPECT_EQ(h.location, "https://cdn/x");
  EXPECT_EQ(unquote_etag(h.linked_etag), kSha);
  ASSERT_TRUE(h.add_line("HTTP/1.1 206 Partial Content\r\n").ok());
  EXPECT_TRUE(h.location.empty());  // the next response's headers start empty
  ASSERT_TRUE(h.add_line("Content-Encoding: GZIP\r\n").ok());
  EXPECT_EQ(h.content_encoding, "gzip");
  const std::string big(1000, 'x');
  Status st = ok_status();
  for (int i = 0; i < 100 && st.ok(); ++i) st = h.add_line("X-Filler: " + big + "\r\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().rule(), "remote.header_bytes");
}

TEST(HubApi, ContentRangeMustNameExactlyTheBytesAsked) {
  EXPECT_TRUE(check_content_range("bytes 0-1023/4096", 0, 1023, 4096).ok());
  for (const char* bad : {"bytes 0-1023/4097", "bytes 1-1024/4096", "bytes 0-1023/*",
                          "bytes  0-1023/4096", "", "items 0-1023/4096"}) {
    const Status st = check_content_range(bad, 0, 1023, 4096);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().rule(), "remote.content_range") << bad;
  }
}

TEST(HubApi, NumbersAndNames) {
  EXPECT_EQ(parse_u64("18446744073709551615"), std::nullopt);  // 20 digits: refused, not wrapped
  EXPECT_EQ(parse_u64("1234"), 1234u);
  EXPECT_EQ(parse_u64("-1"), std::nullopt);
  EXPECT_EQ(parse_u64(""), std::nullopt);
  EXPECT_TRUE(is_plain_file_name("model-00001-of-00141.safetensors"));
  for (const char* bad : {"", ".", "..", "a/b", "a\\b", "a?b", "a#b", "a%2Fb", "a b"}) {
    EXPECT_FALSE(is_plain_file_name(bad)) << bad;
  }
  EXPECT_EQ(unquote_etag("W/\"abc\""), "abc");
}

}  // namespace
}  // namespace qrepack::remote
