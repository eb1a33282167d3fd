#include "qrepack/core/error.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>

namespace qrepack {
namespace {

using K = ErrorKind;
using X = ExitCode;

// Order must match the enum: checked by the static_assert and by error_test.cc.
constexpr std::array kErrorKinds = {
    ErrorKindInfo{K::kUsage, "usage", X::kBadInput},
    ErrorKindInfo{K::kInvalidArgument, "invalid_argument", X::kBadInput},
    ErrorKindInfo{K::kInputNotFound, "input_not_found", X::kBadInput},
    ErrorKindInfo{K::kIoOpen, "io_open", X::kIoFailure},
    ErrorKindInfo{K::kIoRead, "io_read", X::kIoFailure},
    ErrorKindInfo{K::kIoWrite, "io_write", X::kIoFailure},
    ErrorKindInfo{K::kIoSync, "io_sync", X::kIoFailure},
    ErrorKindInfo{K::kIoRename, "io_rename", X::kIoFailure},
    ErrorKindInfo{K::kInternal, "internal", X::kIoFailure},
    ErrorKindInfo{K::kNotRegularFile, "not_regular_file", X::kBadInput},
    ErrorKindInfo{K::kLimitExceeded, "limit_exceeded", X::kBadInput},
    ErrorKindInfo{K::kOutputIsInput, "output_is_input", X::kBadInput},
    ErrorKindInfo{K::kOutputExists, "output_exists", X::kBadInput},
    ErrorKindInfo{K::kOutputBusy, "output_busy", X::kIoFailure},
    ErrorKindInfo{K::kNotSafetensors, "not_safetensors", X::kBadInput},
    ErrorKindInfo{K::kHeaderTooSmall, "header_too_small", X::kBadInput},
    ErrorKindInfo{K::kHeaderTooLarge, "header_too_large", X::kBadInput},
    ErrorKindInfo{K::kHeaderLengthBeyondFile, "header_length_beyond_file", X::kBadInput},
    ErrorKindInfo{K::kHeaderNotUtf8, "header_not_utf8", X::kBadInput},
    ErrorKindInfo{K::kHeaderNotJson, "header_not_json", X::kBadInput},
    ErrorKindInfo{K::kHeaderNotObject, "header_not_object", X::kBadInput},
    ErrorKindInfo{K::kDuplicateKey, "duplicate_key", X::kBadInput},
    ErrorKindInfo{K::kInvalidMetadata, "invalid_metadata", X::kBadInput},
    ErrorKindInfo{K::kInvalidTensorEntry, "invalid_tensor_entry", X::kBadInput},
    ErrorKindInfo{K::kUnknownDtype, "unknown_dtype", X::kBadInput},
    ErrorKindInfo{K::kInvalidShape, "invalid_shape", X::kBadInput},
    ErrorKindInfo{K::kInvalidOffsets, "invalid_offsets", X::kBadInput},
    ErrorKindInfo{K::kSizeOverflow, "size_overflow", X::kBadInput},
    ErrorKindInfo{K::kMisalignedSize, "misaligned_size", X::kBadInput},
    ErrorKindInfo{K::kTensorSizeMismatch, "tensor_size_mismatch", X::kBadInput},
    ErrorKindInfo{K::kOffsetOverlap, "offset_overlap", X::kBadInput},
    ErrorKindInfo{K::kOffsetGap, "offset_gap", X::kBadInput},
    ErrorKindInfo{K::kTrailingBytes, "trailing_bytes", X::kBadInput},
    ErrorKindInfo{K::kTruncatedData, "truncated_data", X::kBadInput},
    ErrorKindInfo{K::kReservedName, "reserved_name", X::kBadInput},
    ErrorKindInfo{K::kInvalidIndex, "invalid_index", X::kBadInput},
    ErrorKindInfo{K::kShardMissing, "shard_missing", X::kBadInput},
    ErrorKindInfo{K::kTensorMissingFromShard, "tensor_missing_from_shard", X::kBadInput},
    ErrorKindInfo{K::kTensorNotInIndex, "tensor_not_in_index", X::kBadInput},
    ErrorKindInfo{K::kShardNotInIndex, "shard_not_in_index", X::kBadInput},
    ErrorKindInfo{K::kDuplicateTensor, "duplicate_tensor", X::kBadInput},
    ErrorKindInfo{K::kTotalSizeMismatch, "total_size_mismatch", X::kBadInput},
    ErrorKindInfo{K::kNoTensorFiles, "no_tensor_files", X::kBadInput},
    ErrorKindInfo{K::kTensorNotFound, "tensor_not_found", X::kBadInput},
    ErrorKindInfo{K::kNotTorchZip, "not_torch_zip", X::kBadInput},
    ErrorKindInfo{K::kZipInvalid, "zip_invalid", X::kBadInput},
    ErrorKindInfo{K::kZipUnsupported, "zip_unsupported", X::kBadInput},
    ErrorKindInfo{K::kPickleInvalid, "pickle_invalid", X::kBadInput},
    ErrorKindInfo{K::kPickleForbidden, "pickle_forbidden", X::kBadInput},
    ErrorKindInfo{K::kPtRecordMissing, "pt_record_missing", X::kBadInput},
    ErrorKindInfo{K::kPtStorageSize, "pt_storage_size", X::kBadInput},
    ErrorKindInfo{K::kPtOutOfBounds, "pt_out_of_bounds", X::kBadInput},
    ErrorKindInfo{K::kPtStorageConflict, "pt_storage_conflict", X::kBadInput},
    ErrorKindInfo{K::kInvalidRecord, "invalid_record", X::kBadInput},
    ErrorKindInfo{K::kRecordCount, "record_count", X::kBadInput},
    ErrorKindInfo{K::kInvalidConfig, "invalid_config", X::kBadInput},
    ErrorKindInfo{K::kInvalidScale, "invalid_scale", X::kBadInput},
    ErrorKindInfo{K::kMissingScale, "missing_scale", X::kBadInput},
    ErrorKindInfo{K::kScaleShapeMismatch, "scale_shape_mismatch", X::kBadInput},
    ErrorKindInfo{K::kUnclaimedTensor, "unclaimed_tensor", X::kBadInput},
    ErrorKindInfo{K::kUnexpectedShape, "unexpected_shape", X::kBadInput},
    ErrorKindInfo{K::kMissingTensors, "missing_tensors", X::kBadInput},
    ErrorKindInfo{K::kNonFiniteWeight, "non_finite_weight", X::kBadInput},
    ErrorKindInfo{K::kParameterMismatch, "parameter_mismatch", X::kBadInput},
    ErrorKindInfo{K::kUnsupportedModel, "unsupported_model", X::kBadInput},
    ErrorKindInfo{K::kUnloadableLayout, "unloadable_layout", X::kBadInput},
    ErrorKindInfo{K::kRemoteFailed, "remote_failed", X::kIoFailure},
    ErrorKindInfo{K::kRemoteProtocol, "remote_protocol", X::kIoFailure},
    ErrorKindInfo{K::kRemoteAccess, "remote_access", X::kBadInput},
    ErrorKindInfo{K::kSourceHashMismatch, "source_hash_mismatch", X::kBadInput},
    ErrorKindInfo{K::kVerificationFailed, "verification_failed", X::kVerificationFailed},
};
static_assert(kErrorKinds.size() == static_cast<std::size_t>(K::kVerificationFailed) + 1,
              "kErrorKinds needs one row per ErrorKind");

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kErrorKinds.size(); ++i) {
    if (static_cast<std::size_t>(kErrorKinds[i].kind) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kErrorKinds rows must follow ErrorKind order");

}  // namespace

const ErrorKindInfo& error_kind_info(ErrorKind kind) {
  return kErrorKinds[static_cast<std::size_t>(kind)];
}

Error& Error::in_file(std::string_view file) {
  if (file_.empty()) file_ = file;
  return *this;
}
Error& Error::in_tensor(std::string_view tensor) {
  if (tensor_.empty()) tensor_ = tensor;
  return *this;
}
Error& Error::with_rule(std::string_view rule) {
  if (rule_.empty()) rule_ = rule;
  return *this;
}
Error& Error::at_offset(std::uint64_t offset) {
  if (!offset_) offset_ = offset;
  return *this;
}

std::string Error::to_string() const {
  std::string out;
  if (!file_.empty()) out += fmt::format("{}: ", file_);
  if (!tensor_.empty()) out += fmt::format("tensor '{}': ", tensor_);
  out += message_;
  std::string where;
  if (!rule_.empty()) where += fmt::format("rule {}", rule_);
  if (offset_) where += fmt::format("{}byte {}", where.empty() ? "" : ", ", *offset_);
  if (!where.empty()) out += fmt::format(" ({})", where);
  return out;
}

}  // namespace qrepack
