#include "qrepack/core/error.h"

#include <gtest/gtest.h>

#include "qrepack/core/checked.h"
#include "qrepack/core/dtype.h"

namespace qrepack {
namespace {

TEST(Error, ContextFormatsOnOneLineAndInnerContextWins) {
  Error e(ErrorKind::kTensorSizeMismatch, "data_offsets span 4 bytes, shape needs 16");
  e.in_tensor("w").with_rule("safetensors.size").in_file("a.safetensors").at_offset(24);
  e.in_tensor("outer");  // an outer layer must not overwrite the precise inner context
  EXPECT_EQ(e.to_string(),
            "a.safetensors: tensor 'w': data_offsets span 4 bytes, shape needs 16 "
            "(rule safetensors.size, byte 24)");
  EXPECT_EQ(e.exit_code(), ExitCode::kBadInput);
}

TEST(Error, ExitCodesFollowTheDocumentedClasses) {
  EXPECT_EQ(error_kind_info(ErrorKind::kVerificationFailed).exit_code,
            ExitCode::kVerificationFailed);
  EXPECT_EQ(error_kind_info(ErrorKind::kIoRead).exit_code, ExitCode::kIoFailure);
  EXPECT_EQ(error_kind_info(ErrorKind::kUsage).exit_code, ExitCode::kBadInput);
  EXPECT_EQ(static_cast<int>(ExitCode::kIoFailure), 3);
}

Result<int> half(int x) {
  if (x % 2) return make_error(ErrorKind::kInvalidArgument, "odd");
  return x / 2;
}
Result<int> quarter(int x) {
  QR_ASSIGN_OR_RETURN(h, half(x));
  QR_ASSIGN_OR_RETURN(q, half(h));
  return q;
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(quarter(8).value(), 2);
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind(), ErrorKind::kInvalidArgument);
}

TEST(Checked, OverflowIsDetected) {
  EXPECT_FALSE(checked_mul(1ull << 32, 1ull << 32).has_value());
  EXPECT_EQ(checked_mul(1ull << 31, 2).value(), 1ull << 32);
  EXPECT_FALSE(checked_add(~0ull, 1).has_value());
  const std::uint64_t shape[] = {2, (1ull << 63)};
  EXPECT_FALSE(checked_numel(shape).has_value());
  EXPECT_EQ(checked_numel(std::span<const std::uint64_t>{}).value(), 1u);
  EXPECT_EQ(ceil_div(~0ull, 2), (1ull << 63));
}

TEST(Dtype, TableDrivesParsingAndSizes) {
  for (const auto& row : all_dtypes()) {
    EXPECT_EQ(dtype_from_safetensors(row.safetensors), row.dtype);
    EXPECT_EQ(&dtype_info(row.dtype), &row);
  }
  EXPECT_FALSE(dtype_from_safetensors("bf16").has_value());  // case-sensitive
  EXPECT_FALSE(dtype_from_safetensors("F8_E4M3FNUZ").has_value());
  EXPECT_EQ(dtype_from_torch_storage("BFloat16Storage"), Dtype::kBF16);
  EXPECT_FALSE(dtype_from_torch_storage("").has_value());
  EXPECT_EQ(dtype_byte_size(Dtype::kF4, 6).value(), 3u);
  EXPECT_FALSE(dtype_byte_size(Dtype::kF4, 5).has_value());  // not whole bytes
  EXPECT_EQ(dtype_byte_size(Dtype::kBF16, 10).value(), 20u);
  EXPECT_FALSE(dtype_byte_size(Dtype::kF64, 1ull << 62).has_value());
}

}  // namespace
}  // namespace qrepack
