// Error, ErrorKind and Result<T>: every failure in qrepack is a value with a kind, a rule and
// the context it happened in (file, tensor, byte offset). Kinds map to exit codes through one
// table (error.cc), so the CLI never decides exit codes on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace qrepack {

/// Process exit codes, documented in README.
enum class ExitCode : int {
  kOk = 0,
  kVerificationFailed = 1,
  kBadInput = 2,
  kIoFailure = 3,
};

/// One kind per distinct failure; tests assert kinds, never message text.
enum class ErrorKind : std::uint8_t {
  kUsage,
  kInvalidArgument,
  kInputNotFound,
  // I/O and environment.
  kIoOpen,
  kIoRead,
  kIoWrite,
  kIoSync,
  kIoRename,
  kInternal,  ///< an unexpected failure (out of memory, a bug): one line and exit 3
  // Inputs that are not what they must be before any byte is read.
  kNotRegularFile,
  kLimitExceeded,  ///< a size, count or depth over one of the named caps (docs/security.md)
  // Output safety.
  kOutputIsInput,
  kOutputExists,
  kOutputBusy,  ///< another live run holds the destination's lock
  // safetensors, in the order the reader checks them.
  kNotSafetensors,
  kHeaderTooSmall,
  kHeaderTooLarge,
  kHeaderLengthBeyondFile,
  kHeaderNotUtf8,
  kHeaderNotJson,
  kHeaderNotObject,
  kDuplicateKey,
  kInvalidMetadata,
  kInvalidTensorEntry,
  kUnknownDtype,
  kInvalidShape,
  kInvalidOffsets,
  kSizeOverflow,
  kMisalignedSize,
  kTensorSizeMismatch,
  kOffsetOverlap,
  kOffsetGap,
  kTrailingBytes,
  kTruncatedData,
  kReservedName,
  // Sharded checkpoints.
  kInvalidIndex,
  kShardMissing,
  kTensorMissingFromShard,
  kTensorNotInIndex,
  kShardNotInIndex,
  kDuplicateTensor,
  kTotalSizeMismatch,
  kNoTensorFiles,
  kTensorNotFound,
  // torch .pt (zip + pickle).
  kNotTorchZip,
  kZipInvalid,
  kZipUnsupported,
  kPickleInvalid,
  kPickleForbidden,
  kPtRecordMissing,
  kPtStorageSize,
  kPtOutOfBounds,
  kPtStorageConflict,
  // Omega dit_svdquant_v1 packs.
  kInvalidRecord,
  kRecordCount,
  // Models and schemes.
  kInvalidConfig,
  kInvalidScale,
  kMissingScale,
  kScaleShapeMismatch,
  kUnclaimedTensor,
  kUnexpectedShape,
  kMissingTensors,
  kNonFiniteWeight,
  kParameterMismatch,
  kUnsupportedModel,  ///< a model feature the reference forward pass does not implement
  kUnloadableLayout,  ///< an output layout the engine's loader would refuse
  // Remote sources (hf://, https://).
  kRemoteFailed,        ///< a request still failing after its retries (network, 5xx, 429)
  kRemoteProtocol,      ///< a server answer qrepack refuses (lying range, encoding, redirects)
  kRemoteAccess,        ///< 401/403/404 from the server: missing, private or gated
  kSourceHashMismatch,  ///< a source file whose bytes do not hash to its published SHA-256
  // Verification.
  kVerificationFailed,
};

/// Static facts about an error kind: a stable name (used in JSON output and tests) and its
/// exit code.
struct ErrorKindInfo {
  ErrorKind kind;
  std::string_view name;
  ExitCode exit_code;
};

/// The table row of `kind`.
const ErrorKindInfo& error_kind_info(ErrorKind kind);

/// A failure with enough context to act on without a debugger.
class Error {
 public:
  Error(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const std::string& file() const { return file_; }
  const std::string& tensor() const { return tensor_; }
  const std::string& rule() const { return rule_; }
  std::optional<std::uint64_t> offset() const { return offset_; }
  ExitCode exit_code() const { return error_kind_info(kind_).exit_code; }

  /// Context setters return *this so a call site can add what it knows in one expression.
  /// An inner layer's context wins: it is the most precise.
  Error& in_file(std::string_view file);
  Error& in_tensor(std::string_view tensor);
  Error& with_rule(std::string_view rule);
  Error& at_offset(std::uint64_t offset);

  /// One line: "FILE: tensor 'T': MESSAGE (rule R, byte N)".
  std::string to_string() const;

 private:
  ErrorKind kind_;
  std::string message_;
  std::string file_;
  std::string tensor_;
  std::string rule_;
  std::optional<std::uint64_t> offset_;
};

/// Either a value or an Error. Cheap to move; [[nodiscard]] so errors cannot be dropped.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  Error& error() & { return std::get<1>(v_); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

/// Result<void>: success carries nothing.
struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() { return Ok{}; }

/// Shorthand constructor: `return make_error(ErrorKind::kIoRead, "short read");`
inline Error make_error(ErrorKind kind, std::string message) {
  return Error(kind, std::move(message));
}

}  // namespace qrepack

/// Evaluates a Result/Status expression; on error returns it from the enclosing function.
#define QR_TRY(expr)                            \
  do {                                          \
    auto qr_try_result_ = (expr);               \
    if (!qr_try_result_.ok()) {                 \
      return std::move(qr_try_result_).error(); \
    }                                           \
  } while (0)

/// Declares `var` from a Result expression, or returns its error.
#define QR_ASSIGN_OR_RETURN(var, expr)       \
  auto var##_result_ = (expr);               \
  if (!var##_result_.ok()) {                 \
    return std::move(var##_result_).error(); \
  }                                          \
  auto var = std::move(var##_result_).value()
