// preempt/buffer.h — 4 KiB-aligned, optionally pre-faulted host memory that O_DIRECT and
// io_uring can use directly, and the dtype vocabulary shared by the store and the torch layer.
//
// Thread-safety: AlignedBuffer is a move-only owner; concurrent reads of its bytes are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace preempt {

inline constexpr size_t kIoAlignment = 4096;

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates `size` bytes (rounded up to kIoAlignment) aligned to kIoAlignment. When `prefault`,
  // every page is written once so later copies never take a page fault. Throws std::bad_alloc.
  explicit AlignedBuffer(size_t size, bool prefault = true);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }          // bytes requested
  size_t capacity() const { return capacity_; }  // bytes allocated (aligned)
  bool empty() const { return size_ == 0; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Element types as they are named on disk. kBytes is an opaque blob (RNG state, user extras).
enum class DType : uint8_t {
  kBytes = 0, kBool, kUInt8, kInt8, kInt16, kInt32, kInt64,
  kFloat16, kBFloat16, kFloat32, kFloat64, kComplex64, kComplex128,
};
// Bytes per element (kBytes: 1).
size_t DTypeSize(DType t);
// "float32", "bytes", ...
const char* DTypeName(DType t);
// False when `name` is not a known dtype.
bool DTypeFromName(const std::string& name, DType* out);

// Product of dims; -1 when a dim is negative or the product overflows int64.
int64_t NumElements(const std::vector<int64_t>& shape);

}  // namespace preempt
