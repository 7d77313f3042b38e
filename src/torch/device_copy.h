// Device-to-host copies of an overlapped snapshot, on a CUDA stream of their own per device.
//
// The copies are queued after the work already queued on the device's current stream (the step
// that produced the state), so the host never waits to launch them. Two orderings are placed on
// the GPU, never on the host: tensors the next forward pass changes (buffers) are copied before
// that pass's kernels run (order_current_streams_after_queued), and the optimizer update's
// kernels wait for every copy (fence). The copy thread waits for completion on the host
// (synchronize) before the bytes are persisted.
//
// Built with streams only when LibTorch has CUDA and the toolkit was found
// (PREEMPT_TORCH_CUDA_STREAMS); otherwise Available() is false and snapshots copy device tensors
// on the training thread, synchronously.
//
// Thread-safety: copy/order/close/fence from the training thread; synchronize from the copy
// thread after close.
#pragma once

#include <memory>

#include <ATen/ATen.h>

namespace preempt::torch::internal {

class DeviceCopies {
 public:
  static bool Available();
  DeviceCopies();
  ~DeviceCopies();
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  // Queues a copy of the CUDA tensor `src` into `dst` (pinned host memory, src's dtype and shape).
  void copy(const at::Tensor& src, void* dst);
  // The current streams wait (GPU side) for the copies queued so far.
  void order_current_streams_after_queued();
  // Marks the end of the snapshot's copies (events recorded); nothing is queued after.
  void close();
  // The current streams wait (GPU side) for every copy: before the optimizer update.
  void fence();
  // The host waits for every copy.
  void synchronize();
  bool empty() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace preempt::torch::internal
