#include "preempt/status.h"

#include <cerrno>
#include <cstring>

namespace preempt {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kVersionMismatch: return "VersionMismatch";
    case StatusCode::kMismatch: return "Mismatch";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kNoSpace: return "NoSpace";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromErrno(int sys_errno, const std::string& op, const std::string& path) {
  StatusCode code = StatusCode::kIoError;
  if (sys_errno == ENOSPC || sys_errno == EFBIG || sys_errno == EDQUOT) code = StatusCode::kNoSpace;
  if (sys_errno == ENOENT) code = StatusCode::kNotFound;
  char buf[128];
  // GNU strerror_r returns the message pointer (may not use buf).
  const char* msg = strerror_r(sys_errno, buf, sizeof(buf));
  std::string text = op;
  if (!path.empty()) text += " " + path;
  text += ": ";
  text += msg;
  return Status(code, std::move(text), sys_errno);
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_, errno_);
}

}  // namespace preempt
