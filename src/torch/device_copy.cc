// DeviceCopies without CUDA streams: never available; snapshots copy device tensors
// synchronously instead (see device_copy_cuda.cc for the stream version).
#include "torch/device_copy.h"

#include "preempt/status.h"

namespace preempt::torch::internal {

struct DeviceCopies::Impl {};

bool DeviceCopies::Available() { return false; }
DeviceCopies::DeviceCopies() = default;
DeviceCopies::~DeviceCopies() = default;
void DeviceCopies::copy(const at::Tensor&, void*) {
  throw Error(Status(StatusCode::kInternal, "device copies on a stream are not built in"));
}
void DeviceCopies::order_current_streams_after_queued() {}
void DeviceCopies::close() {}
void DeviceCopies::fence() {}
void DeviceCopies::synchronize() {}
bool DeviceCopies::empty() const { return true; }

}  // namespace preempt::torch::internal
