// Checkpoints of many shards: descriptors stay bounded (kMaxOpenFiles) whatever the shard
// count, so a checkpoint reads under a low `ulimit -n`; a shard whose descriptor was closed to
// make room is reopened and must still be the same file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "qrepack/io/byte_source.h"
#include "qrepack/io/checkpoint.h"
#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

// The tiny fixture with about one tensor a shard (about 300 shards).
std::string many_shards(const testing::TempDir& d) {
  const std::string out = (d / "many").string();
  const auto r = run_cli({"fixture", "moe-fp8", "-o", out, "--max-shard-size", "1kB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// Lowers the soft descriptor limit for the test's scope (children inherit it).
class DescriptorLimit {
 public:
  explicit DescriptorLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = soft;
    ::setrlimit(RLIMIT_NOFILE, &lowered);
  }
  ~DescriptorLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

TEST(ManyShards, ReadAndConvertUnderALowDescriptorLimit) {
  testing::TempDir d;
  const std::string src = many_shards(d);
  std::size_t shards = 0;
  for (const auto& e : fs::directory_iterator(src))
    shards += e.path().extension() == ".safetensors";
  ASSERT_GT(shards, 3 * kMaxOpenFiles);
  const DescriptorLimit limit(kMaxOpenFiles + 32);
  const auto i = run_cli({"inspect", src});
  EXPECT_EQ(i.exit_code, 0) << i.err;
  const auto c = run_cli({"convert", src, "-o", (d / "out").string(), "--to", "int8-row"});
  EXPECT_EQ(c.exit_code, 0) << c.err;
}

TEST(ManyShards, AShardChangedAfterItWasOpenedIsRefusedWhenReopened) {
  testing::TempDir d;
  const std::string src = many_shards(d);
  auto ck = Checkpoint::open(src);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  // The first shard opened was closed to make room for the others; change its mtime.
  const TensorRef first = *ck->tensors().begin();
  const std::string path = ck->shards()[first.shard].path();
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  std::vector<std::uint8_t> buf(first.entry->byte_size());
  const Status st = ck->read(first, 0, buf);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().rule(), "input.unchanged");
  // A shard read recently keeps its descriptor and reads on (the same file, still open).
  const TensorRef last = ck->tensors()[ck->tensors().size() - 1];
  std::vector<std::uint8_t> tail(last.entry->byte_size());
  EXPECT_TRUE(ck->read(last, 0, tail).ok());
}

}  // namespace
}  // namespace qrepack
