// preempt/checkpoint_entry.h — the named entries a checkpoint holds: what a caller saves
// (SaveItem), where a restore puts it (RestoreTarget), and how it is described on disk
// (TensorInfo). Shared by the store and the on-disk format below it.
//
// SaveItem and RestoreTarget list their common fields in the same order: name, dtype, shape,
// data, nbytes.
//
// Thread-safety: plain values; the buffers they point to belong to the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "preempt/buffer.h"

namespace preempt {

// One named buffer to save. `data` must stay valid and unchanged until the save is done.
struct SaveItem {
  // 1..512 bytes of [A-Za-z0-9_.:@#+=,[]()-]; no '/', no "..", not starting with '.'.
  // Use ':' or '.' to build hierarchical names ("model:fc1.weight", "optim:state.3.exp_avg").
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;      // empty for kBytes blobs and scalars
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Where a named entry should be restored. The byte count, dtype and shape must match the
// checkpoint's entry exactly, or restore fails naming the entry.
struct RestoreTarget {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t nbytes = 0;
  bool check_shape = true;  // false for kBytes blobs whose size is known but not their shape
  // Read into RestoreResult::owned instead of `data`; the entry's size, dtype and shape are then
  // the checkpoint's (the caller checks them). For entries whose size is not known beforehand.
  bool owned = false;
  // The checkpoint may lack this entry, even in a strict restore (not listed in `missing`).
  bool optional = false;
};

// One entry as recorded in a rank's manifest.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  uint64_t offset = 0;   // within the rank's data file
  uint64_t nbytes = 0;
};

// True when `name` is acceptable as a SaveItem name (see SaveItem::name).
bool IsValidEntryName(const std::string& name);

}  // namespace preempt
