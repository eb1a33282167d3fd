// Files qrepack writes load with Debian's torch.load(weights_only=True) and read back exactly.
#include "qrepack/io/torch_pt_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "qrepack/io/byte_sink.h"
#include "qrepack/io/torch_pt.h"
#include "test_util.h"

namespace qrepack {
namespace {

template <typename T>
std::vector<std::uint8_t> raw(std::vector<T> v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A tensor written eagerly, or by a deferred writer in two pieces.
PtOutPtr tensor(bool deferred, Dtype dtype, std::vector<std::uint64_t> shape,
                std::vector<std::uint8_t> bytes) {
  if (!deferred) return pt_tensor(dtype, std::move(shape), std::move(bytes));
  return pt_tensor_deferred(dtype, std::move(shape), [bytes](ByteSink& sink) -> Status {
    const std::size_t half = bytes.size() / 2;
    QR_TRY(sink.write(std::span(bytes).first(half)));
    return sink.write(std::span(bytes).subspan(half));
  });
}

PtOutPtr sample(bool deferred = false) {
  const auto pt_tensor = [deferred](Dtype d, std::vector<std::uint64_t> shape,
                                    std::vector<std::uint8_t> b) {
    return tensor(deferred, d, std::move(shape), std::move(b));
  };
  return pt_dict({
      {"format", pt_str("omega_e0m3_v1")},
      {"schema_version", pt_int(1)},
      {"flag", pt_bool(true)},
      {"none", pt_none()},
      {"big", pt_int(1ll << 40)},
      {"neg", pt_int(-70000)},
      {"weights", pt_dict({{"layer.0", pt_dict({{"packed", pt_tensor(Dtype::kU8, {2, 3},
                                                                     {0, 1, 2, 253, 254, 255})},
                                                {"N", pt_int(2)},
                                                {"K", pt_int(6)}})}})},
      {"f16", pt_tensor(Dtype::kF16, {2}, raw<std::uint16_t>({0x3C00, 0xC100}))},
      {"bf16", pt_tensor(Dtype::kBF16, {2}, raw<std::uint16_t>({0x3F80, 0xC060}))},
      {"f32", pt_tensor(Dtype::kF32, {2, 2}, raw<float>({0.5f, 1.5f, 2.5f, 3.5f}))},
      {"i64", pt_tensor(Dtype::kI64, {2}, raw<std::int64_t>({-1, 1ll << 40}))},
      {"bool", pt_tensor(Dtype::kBool, {2}, {1, 0})},
      {"scalar", pt_tensor(Dtype::kI32, {}, raw<std::int32_t>({7}))},
      {"layers", pt_list({pt_str("a"), pt_str("b")})},
      {"empty", pt_tensor(Dtype::kF32, {0, 4}, {})},
  });
}

TEST(TorchPtWriter, TorchLoadsItWithWeightsOnly) {
  testing::TempDir dir;
  const std::string path = (dir / "art.pt").string();
  ASSERT_TRUE(write_torch_file(path, sample()).ok());
  EXPECT_EQ(testing::run_test_python("check_pt_written.py", {path}), 0);
}

TEST(TorchPtWriter, ReadsBackAndIsAligned) {
  testing::TempDir dir;
  const std::string path = (dir / "art.pt").string();
  ASSERT_TRUE(write_torch_file(path, sample()).ok());
  auto f = TorchFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  const PtValue* packed = f->root().get("weights")->get("layer.0")->get("packed");
  const auto& t = std::get<PtTensor>(packed->v);
  EXPECT_EQ(t.storage_data_offset % 64, 0u);  // torch's 64-byte record alignment
  std::vector<std::uint8_t> b(6);
  ASSERT_TRUE(f->read(t, b).ok());
  EXPECT_EQ(b, (std::vector<std::uint8_t>{0, 1, 2, 253, 254, 255}));
  EXPECT_EQ(std::get<std::string>(f->root().get("format")->v), "omega_e0m3_v1");
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"art.pt"});  // no temp left
}

TEST(TorchPtWriter, DeferredStoragesWriteTheSameBytesAndTorchLoadsThem) {
  testing::TempDir dir;
  const std::string eager = (dir / "eager.pt").string(), streamed = (dir / "streamed.pt").string();
  ASSERT_TRUE(write_torch_file(eager, sample()).ok());
  ASSERT_TRUE(write_torch_file(streamed, sample(true)).ok());
  // Same records, offsets and CRC32s: the checksums patched into the local headers are right.
  EXPECT_EQ(testing::read_bytes(streamed), testing::read_bytes(eager));
  EXPECT_EQ(testing::run_test_python("check_pt_written.py", {streamed}), 0);
}

TEST(TorchPtWriter, ADeferredWriterThatFailsOrMiscountsLeavesNoFile) {
  testing::TempDir dir;
  const std::string path = (dir / "x.pt").string();
  const auto failing = pt_tensor_deferred(Dtype::kU8, {4}, [](ByteSink&) -> Status {
    return Error(ErrorKind::kInvalidRecord, "the source record is damaged");
  });
  auto st = write_torch_file(path, pt_dict({{"t", failing}}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind(), ErrorKind::kInvalidRecord);
  const auto short_write = pt_tensor_deferred(
      Dtype::kF32, {2}, [](ByteSink& sink) { return sink.write(std::vector<std::uint8_t>(7, 1)); });
  st = write_torch_file(path, pt_dict({{"t", short_write}}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("7 bytes produced for a 8-byte storage"), std::string::npos)
      << st.error().message();
  EXPECT_TRUE(testing::list_dir(dir.path()).empty());
}

// A Python float is BINFLOAT ('G' and the double's 8 bytes, most significant first, as
// pickle.dumps(1.5, 2) writes: 3F F8 00 ...) and reads back as the same double.
TEST(TorchPtWriter, AFloatIsBinfloatBigEndian) {
  testing::TempDir dir;
  const std::string path = (dir / "f.pt").string();
  ASSERT_TRUE(write_torch_file(path, pt_dict({{"c", pt_float(1.5)}, {"d", pt_float(-0.1)}})).ok());
  const auto bytes = testing::read_bytes(path);
  const std::vector<std::uint8_t> want = {'G', 0x3F, 0xF8, 0, 0, 0, 0, 0, 0};
  EXPECT_NE(std::search(bytes.begin(), bytes.end(), want.begin(), want.end()), bytes.end());
  auto f = TorchFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(std::get<double>(f->root().get("c")->v), 1.5);
  EXPECT_EQ(std::get<double>(f->root().get("d")->v), -0.1);
}

TEST(TorchPtWriter, RefusesWhatTorch113CannotLoadOrMismatchedBytes) {
  testing::TempDir dir;
  const std::string path = (dir / "x.pt").string();
  EXPECT_FALSE(write_torch_file(path, pt_dict({{"t", pt_tensor(Dtype::kF8E4M3, {1}, {0})}})).ok());
  EXPECT_FALSE(
      write_torch_file(path, pt_dict({{"t", pt_tensor(Dtype::kF32, {2}, {0, 0, 0})}})).ok());
  EXPECT_EQ(write_torch_file(path, pt_dict({{"a", pt_int(1)}, {"a", pt_int(2)}})).error().kind(),
            ErrorKind::kDuplicateKey);
  EXPECT_TRUE(testing::list_dir(dir.path()).empty());
}

}  // namespace
}  // namespace qrepack
