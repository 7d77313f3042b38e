// preempt/status.h — the one error type of the preempt C++ API.
//
// `Status` is a value: OK, or a code plus a one-line message that names the file and the
// operation ("open /nvme/ckpt/step-00000100.tmp/rank-00000.bin for write: No space left on
// device"). Internal layers return Status; public blocking calls that cannot return a value
// alongside throw `preempt::Error`, which carries the same Status.
//
// Thread-safety: Status and Error are immutable values; safe to copy across threads.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace preempt {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,   // caller passed something unusable (bad option, mismatched buffer)
  kNotFound,          // no such checkpoint / tensor / file
  kCorruption,        // checksum mismatch, truncation, unparsable or hostile on-disk data
  kVersionMismatch,   // on-disk format version this build does not understand
  kMismatch,          // restore target disagrees with the checkpoint (shape, dtype, world size)
  kIoError,           // an OS call failed (errno kept)
  kNoSpace,           // ENOSPC / EFBIG / EDQUOT
  kDeadlineExceeded,  // a wait ran past its deadline
  kAborted,           // cancelled or superseded
  kUnavailable,       // a facility is not available here (io_uring refused, no CUDA)
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  // Builds a status from an errno value: "<op> <path>: <strerror>"; ENOSPC/EFBIG/EDQUOT map to
  // kNoSpace, ENOENT to kNotFound, everything else to kIoError.
  static Status FromErrno(int sys_errno, const std::string& op, const std::string& path);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }
  // "Corruption: <message>" or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  std::string message_;
};

// Thrown by public API calls that report failure by exception.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }
  StatusCode code() const { return status_.code(); }

 private:
  Status status_;
};

// Throws preempt::Error when `s` is not OK.
inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace preempt

// Propagates a non-OK Status from an expression to the caller.
#define PREEMPT_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::preempt::Status _preempt_st = (expr);        \
    if (!_preempt_st.ok()) return _preempt_st;     \
  } while (0)
