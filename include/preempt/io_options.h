// preempt/io_options.h — how checkpoint files are written and read: the I/O backend and the
// O_DIRECT policy. Shared by the store (StoreOptions) and the io engine below it.
//
// Thread-safety: plain enums.
#pragma once

namespace preempt {

enum class IoBackend {
  kAuto,   // io_uring; a pwrite/pread thread when io_uring is refused (EPERM/ENOSYS), logged once
  kUring,  // io_uring or fail
  kPosix,  // pwrite/pread on a background thread (also used for files without a native fd)
};

enum class DirectIo {
  kAuto,  // O_DIRECT; buffered + fdatasync when the file system refuses it (EINVAL), logged once
  kOn,    // O_DIRECT or fail
  kOff,   // buffered + fdatasync
};

}  // namespace preempt
