#include "qrepack/io/safetensors_writer.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qrepack/io/byte_sink.h"
#include "qrepack/io/safetensors.h"
#include "test_util.h"

namespace qrepack {
namespace {

std::string header_text(const SafetensorsLayout& l) {
  const auto h = safetensors_header_bytes(l);
  EXPECT_EQ(h.size(), l.header_size);
  return std::string(h.begin() + 8, h.end());
}
std::uint64_t header_n(const SafetensorsLayout& l) {
  const auto h = safetensors_header_bytes(l);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | h[static_cast<std::size_t>(i)];
  return n;
}

// reference/serialization.md A6: byte-exact headers of the reference crate.
TEST(SafetensorsWriter, MatchesTheCrateGoldenHeaders) {
  auto empty = plan_safetensors({}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->header_size, 16u);
  EXPECT_EQ(header_n(*empty), 8u);
  EXPECT_EQ(header_text(*empty), "{}      ");

  auto meta = plan_safetensors({}, {{"framework", "pt"}});
  EXPECT_EQ(header_n(*meta), 40u);
  EXPECT_EQ(header_text(*meta), std::string(R"({"__metadata__":{"framework":"pt"}})") + "     ");

  auto one = plan_safetensors({{"attn.0", Dtype::kF32, {1, 2, 3}}}, {});
  EXPECT_EQ(header_n(*one), 64u);
  EXPECT_EQ(header_text(*one),
            R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})");

  auto padded = plan_safetensors({{"attn0", Dtype::kF32, {1, 1, 2, 3}}}, {});
  EXPECT_EQ(header_n(*padded), 72u);
  EXPECT_EQ(header_text(*padded).substr(65), std::string(7, ' '));

  auto f4 = plan_safetensors({{"attn.0", Dtype::kF4, {1, 2}}}, {});
  EXPECT_EQ(header_n(*f4), 64u);
  EXPECT_EQ(header_text(*f4).substr(0, 60),
            R"({"attn.0":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}})");
}

TEST(SafetensorsWriter, StreamsInChunksAndReadsBack) {
  auto layout = plan_safetensors(
      {{"w", Dtype::kBF16, {3, 5}}, {"b", Dtype::kU8, {7}}, {"s", Dtype::kF32, {}}}, {{"k", "v"}});
  ASSERT_TRUE(layout.ok());
  MemorySink sink;
  SafetensorsWriter w(*layout, sink);
  std::vector<std::uint8_t> wbytes(30);
  for (std::size_t i = 0; i < wbytes.size(); ++i) wbytes[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_TRUE(w.begin_tensor("w").ok());
  ASSERT_TRUE(w.append(std::span(wbytes).subspan(0, 11)).ok());
  ASSERT_TRUE(w.append(std::span(wbytes).subspan(11)).ok());
  ASSERT_TRUE(w.write_tensor("b", std::vector<std::uint8_t>(7, 0xAB)).ok());
  ASSERT_TRUE(w.write_tensor("s", std::vector<std::uint8_t>{1, 2, 3, 4}).ok());
  ASSERT_TRUE(w.finish().ok());
  EXPECT_TRUE(sink.committed());
  EXPECT_EQ(sink.bytes().size(), layout->file_size());

  auto f = SafetensorsFile::from_source(std::make_shared<MemorySource>("m", sink.bytes()));
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->header().header_length % 8, 0u);
  EXPECT_EQ(f->header().metadata.at("k"), "v");
  const auto found = std::ranges::find(f->tensors(), std::string_view("w"), &TensorEntry::name);
  ASSERT_NE(found, f->tensors().end());
  const TensorEntry& t = *found;
  std::vector<std::uint8_t> back(30);
  ASSERT_TRUE(f->read(t, 0, back).ok());
  EXPECT_EQ(back, wbytes);
}

TEST(SafetensorsWriter, RejectsMisuseAndBadPlans) {
  EXPECT_EQ(plan_safetensors({{"__metadata__", Dtype::kU8, {1}}}, {}).error().kind(),
            ErrorKind::kReservedName);
  EXPECT_EQ(plan_safetensors({{"a", Dtype::kU8, {1}}, {"a", Dtype::kU8, {1}}}, {}).error().kind(),
            ErrorKind::kDuplicateTensor);
  EXPECT_EQ(plan_safetensors({{"a", Dtype::kF4, {3}}}, {}).error().kind(),
            ErrorKind::kMisalignedSize);
  EXPECT_EQ(plan_safetensors({{"a", Dtype::kF64, {1ull << 62}}}, {}).error().kind(),
            ErrorKind::kSizeOverflow);

  auto layout = plan_safetensors({{"a", Dtype::kU8, {2}}, {"b", Dtype::kU8, {2}}}, {});
  MemorySink sink;
  SafetensorsWriter w(*layout, sink);
  EXPECT_FALSE(w.begin_tensor("b").ok());  // out of order
  ASSERT_TRUE(w.begin_tensor("a").ok());
  EXPECT_FALSE(w.append(std::vector<std::uint8_t>(3)).ok());  // too many bytes
  ASSERT_TRUE(w.append(std::vector<std::uint8_t>(1)).ok());
  EXPECT_FALSE(w.begin_tensor("b").ok());  // previous incomplete
  EXPECT_FALSE(w.finish().ok());
  EXPECT_FALSE(sink.committed());
}

TEST(SafetensorsWriter, SortForAlignmentPutsWideElementsFirst) {
  std::vector<TensorSpec> t = {{"q", Dtype::kU8, {3}},
                               {"s", Dtype::kF32, {1}},
                               {"h", Dtype::kBF16, {1}},
                               {"s2", Dtype::kF32, {1}}};
  sort_for_alignment(t);
  EXPECT_EQ(t[0].name, "s");
  EXPECT_EQ(t[1].name, "s2");
  EXPECT_EQ(t[2].name, "h");
  EXPECT_EQ(t[3].name, "q");
}

TEST(AtomicFileSink, NothingAppearsUnlessCommitted) {
  testing::TempDir dir;
  const std::string path = (dir / "out.bin").string();
  {
    auto sink = AtomicFileSink::create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->write(std::vector<std::uint8_t>(100, 1)).ok());
    EXPECT_TRUE(std::filesystem::exists((*sink)->temp_path()));
  }  // abandoned
  EXPECT_TRUE(testing::list_dir(dir.path()).empty());
  {
    auto sink = AtomicFileSink::create(path);
    ASSERT_TRUE((*sink)->write(std::vector<std::uint8_t>(5 << 20, 2)).ok());  // > buffer
    ASSERT_TRUE((*sink)->write(std::vector<std::uint8_t>(3, 3)).ok());
    ASSERT_TRUE((*sink)->commit().ok());
  }
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"out.bin"});
  const auto bytes = testing::read_bytes(path);
  ASSERT_EQ(bytes.size(), (5u << 20) + 3);
  EXPECT_EQ(bytes.front(), 2);
  EXPECT_EQ(bytes.back(), 3);
}

TEST(AtomicFileSink, ReservedSpaceIsTrimmedToWhatWasWrittenAndTooMuchFailsUpFront) {
  testing::TempDir dir;
  const std::string path = (dir / "out.bin").string();
  bool allocates = false;
  {
    auto sink = AtomicFileSink::create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->reserve(std::uint64_t{1} << 20).ok());
    allocates = std::filesystem::file_size((*sink)->temp_path()) == (std::uint64_t{1} << 20);
    ASSERT_TRUE((*sink)->write(std::vector<std::uint8_t>(10, 7)).ok());
    ASSERT_TRUE((*sink)->commit().ok());
  }
  EXPECT_EQ(testing::read_bytes(path), std::vector<std::uint8_t>(10, 7));
  if (!allocates) return;  // a filesystem without fallocate: nothing is reserved up front
  auto sink = AtomicFileSink::create((dir / "huge.bin").string());
  ASSERT_TRUE(sink.ok());
  const Status st = (*sink)->reserve(std::uint64_t{1} << 60);  // an exabyte: no room
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind(), ErrorKind::kIoWrite);
  EXPECT_EQ(st.error().rule(), "output.space");
  EXPECT_NE(st.error().message().find("1152921504606846976-byte"), std::string::npos)
      << st.error().message();
}

// On tmpfs a reservation allocates nothing (fallocate would allocate the memory itself, before
// any data) but the free space is still checked up front.
TEST(AtomicFileSink, OnTmpfsReservingChecksTheFreeSpaceWithoutAllocating) {
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC) GTEST_SKIP() << "no tmpfs";
  const std::string path = "/dev/shm/qrepack-reserve-test-" + std::to_string(::getpid());
  {
    auto sink = AtomicFileSink::create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->reserve(std::uint64_t{1} << 20).ok());
    EXPECT_EQ(std::filesystem::file_size((*sink)->temp_path()), 0u);
    const Status st = (*sink)->reserve(std::uint64_t{1} << 60);  // an exabyte: no room
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().rule(), "output.space");
    EXPECT_NE(st.error().message().find("1152921504606846976-byte"), std::string::npos)
        << st.error().message();
    ASSERT_TRUE((*sink)->write(std::vector<std::uint8_t>(10, 7)).ok());
    ASSERT_TRUE((*sink)->commit().ok());
  }
  EXPECT_EQ(testing::read_bytes(path), std::vector<std::uint8_t>(10, 7));
  std::filesystem::remove(path);
}

TEST(AtomicFileSink, FailsCleanlyInAMissingDirectory) {
  testing::TempDir dir;
  auto sink = AtomicFileSink::create((dir / "no/such/dir/x").string());
  ASSERT_FALSE(sink.ok());
  EXPECT_EQ(sink.error().kind(), ErrorKind::kIoOpen);
}

}  // namespace
}  // namespace qrepack
