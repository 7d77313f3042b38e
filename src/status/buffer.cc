#include "preempt/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace preempt {
namespace {
constexpr size_t kHugePage = 2 << 20;
}  // namespace

AlignedBuffer::AlignedBuffer(size_t size, bool prefault) : size_(size) {
  if (size == 0) return;
  capacity_ = AlignUp(size, kIoAlignment);
  // Large buffers are 2 MiB-aligned and asked to be backed by transparent huge pages: 512x fewer
  // page faults when pre-faulting (a fault costs tens of microseconds on some VMs) and fewer TLB
  // misses in the copies. (MADV_POPULATE_WRITE was tried: faster to pre-fault, but later copies
  // into the 4 KiB pages it maps ran ~10x slower on the VMs here.)
  const bool huge = capacity_ >= kHugePage;
  if (huge) capacity_ = AlignUp(capacity_, kHugePage);
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePage : kIoAlignment, capacity_) != 0) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(p);
  if (huge) (void)madvise(data_, capacity_, MADV_HUGEPAGE);
  if (prefault) {
    // Touch every page now so the copy into staging on the training thread never faults.
    std::memset(data_, 0, capacity_);
  }
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.size_ = o.capacity_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    capacity_ = o.capacity_;
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  return *this;
}

namespace {
struct DTypeRow {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::kBytes, "bytes", 1},       {DType::kBool, "bool", 1},         {DType::kUInt8, "uint8", 1},
    {DType::kInt8, "int8", 1},         {DType::kInt16, "int16", 2},       {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},       {DType::kFloat16, "float16", 2},   {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},   {DType::kFloat64, "float64", 8},   {DType::kComplex64, "complex64", 8},
    {DType::kComplex128, "complex128", 16},
};
}  // namespace

size_t DTypeSize(DType t) {
  for (const auto& row : kDTypes)
    if (row.type == t) return row.size;
  return 1;
}

const char* DTypeName(DType t) {
  for (const auto& row : kDTypes)
    if (row.type == t) return row.name;
  return "unknown";
}

bool DTypeFromName(const std::string& name, DType* out) {
  for (const auto& row : kDTypes) {
    if (name == row.name) {
      *out = row.type;
      return true;
    }
  }
  return false;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace preempt
