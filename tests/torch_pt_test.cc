// The .pt reader against files made by Debian's real torch.save, and a hostile-file corpus.
#include "qrepack/io/torch_pt.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "test_util.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;

class TorchPt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_EQ(testing::run_test_python("make_pt_files.py", {dir_->path().string()}), 0)
        << "needs Debian's python3-torch (make test installs it)";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string file(const std::string& n) { return (*dir_ / n).string(); }
  static testing::TempDir* dir_;
};
testing::TempDir* TorchPt::dir_ = nullptr;

std::vector<std::uint8_t> read_tensor(const TorchFile& f, const PtValue& v) {
  const auto& t = std::get<PtTensor>(v.v);
  std::vector<std::uint8_t> out(t.numel() * dtype_info(t.dtype).bits / 8);
  EXPECT_TRUE(f.read(t, out).ok());
  return out;
}

TEST_F(TorchPt, ReadsEveryDtypeViewAndNestingTorchSaveWrites) {
  auto f = TorchFile::open(file("good.pt"));
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  const PtValue& root = f->root();
  ASSERT_TRUE(root.is_dict());
  const std::pair<const char*, Dtype> cases[] = {
      {"f16", Dtype::kF16},    {"bf16", Dtype::kBF16},      {"f32", Dtype::kF32},
      {"f64", Dtype::kF64},    {"i64", Dtype::kI64},        {"i32", Dtype::kI32},
      {"i16", Dtype::kI16},    {"i8", Dtype::kI8},          {"u8", Dtype::kU8},
      {"bool", Dtype::kBool},  {"transposed", Dtype::kF32}, {"view_a", Dtype::kF32},
      {"view_b", Dtype::kF32}, {"scalar", Dtype::kF32}};
  for (const auto& [name, dtype] : cases) {
    const PtValue* v = root.get(name);
    ASSERT_NE(v, nullptr) << name;
    ASSERT_TRUE(v->is_tensor()) << name;
    EXPECT_EQ(std::get<PtTensor>(v->v).dtype, dtype) << name;
    EXPECT_EQ(read_tensor(*f, *v), testing::read_bytes(file(std::string(name) + ".bin"))) << name;
  }
  const auto& tr = std::get<PtTensor>(root.get("transposed")->v);
  EXPECT_FALSE(tr.contiguous());
  EXPECT_EQ(tr.shape, (std::vector<std::uint64_t>{4, 3}));
  EXPECT_EQ(tr.stride, (std::vector<std::uint64_t>{1, 4}));
  // Shared storage: both views point into one 10-element record.
  const auto& a = std::get<PtTensor>(root.get("view_a")->v);
  const auto& b = std::get<PtTensor>(root.get("view_b")->v);
  EXPECT_EQ(a.storage_key, b.storage_key);
  EXPECT_EQ(a.storage_offset, 2u);
  EXPECT_EQ(b.storage_offset, 5u);
  EXPECT_TRUE(std::get<PtTensor>(root.get("scalar")->v).shape.empty());
  const PtValue* nested = root.get("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(std::get<bool>(nested->get("flag")->v), true);
  EXPECT_EQ(std::get<std::int64_t>(nested->get("n")->v), -3);
  const auto& list = std::get<PtList>(nested->get("list")->v);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(read_tensor(*f, *list[0]), testing::read_bytes(file("nested_list0.bin")));
  EXPECT_EQ(std::get<std::int64_t>(list[1]->v), 5);
  EXPECT_EQ(std::get<std::string>(list[2]->v), "text");
}

TEST_F(TorchPt, HostileFilesGetTheirOwnKindsAndNothingRuns) {
  const std::pair<const char*, ErrorKind> cases[] = {
      {"os_system.pt", ErrorKind::kPickleForbidden},
      {"short_record.pt", ErrorKind::kPtStorageSize},
      {"missing_record.pt", ErrorKind::kPtRecordMissing},
      {"out_of_bounds.pt", ErrorKind::kPtOutOfBounds},
      {"truncated.pt", ErrorKind::kZipInvalid},
      {"protocol4.pt", ErrorKind::kPickleForbidden},
  };
  for (const auto& [name, kind] : cases) {
    auto f = TorchFile::open(file(name));
    ASSERT_FALSE(f.ok()) << name;
    EXPECT_EQ(f.error().kind(), kind) << name << ": " << f.error().to_string();
    EXPECT_EQ(f.error().file(), file(name));
  }
  auto f = TorchFile::open(file("os_system.pt"));
  EXPECT_NE(f.error().message().find("posix.system"), std::string::npos) << f.error().message();
  auto s = TorchFile::open(file("f32.bin"));
  EXPECT_EQ(s.error().kind(), ErrorKind::kNotTorchZip);
}

}  // namespace
}  // namespace qrepack
