// DeviceCopies on CUDA streams (built when LibTorch has CUDA and the toolkit is found).
#include <map>
#include <utility>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "torch/device_copy.h"

namespace preempt::torch::internal {

struct DeviceCopies::Impl {
  struct Device {
    c10::cuda::CUDAStream stream;
    bool pending = false;  // copies queued since the last order_current_streams_after_queued
  };
  std::map<c10::DeviceIndex, Device> devices;
  std::vector<std::pair<c10::DeviceIndex, at::cuda::CUDAEvent>> done;

  Device& device(c10::DeviceIndex d) {
    auto it = devices.find(d);
    if (it != devices.end()) return it->second;
    Device dev{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, d)};
    // The copies read what the work queued so far on the current stream produces.
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(d));
    produced.block(dev.stream);
    return devices.emplace(d, dev).first->second;
  }
};

bool DeviceCopies::Available() { return true; }
DeviceCopies::DeviceCopies() : impl_(std::make_unique<Impl>()) {}
DeviceCopies::~DeviceCopies() = default;

void DeviceCopies::copy(const at::Tensor& src, void* dst) {
  const c10::DeviceIndex d = src.device().index();
  Impl::Device& dev = impl_->device(d);
  c10::cuda::CUDAStreamGuard guard(dev.stream);
  at::Tensor view = at::from_blob(dst, src.sizes(), at::TensorOptions().dtype(src.scalar_type()));
  view.copy_(src, /*non_blocking=*/true);
  src.record_stream(dev.stream);  // the caching allocator keeps src's memory until the copy ran
  dev.pending = true;
}

void DeviceCopies::order_current_streams_after_queued() {
  for (auto& [d, dev] : impl_->devices) {
    if (!dev.pending) continue;
    at::cuda::CUDAEvent copied;
    copied.record(dev.stream);
    copied.block(c10::cuda::getCurrentCUDAStream(d));
    dev.pending = false;
  }
}

void DeviceCopies::close() {
  for (auto& [d, dev] : impl_->devices) {
    impl_->done.emplace_back(d, at::cuda::CUDAEvent());
    impl_->done.back().second.record(dev.stream);
  }
}

void DeviceCopies::fence() {
  for (auto& [d, ev] : impl_->done) ev.block(c10::cuda::getCurrentCUDAStream(d));
}

void DeviceCopies::synchronize() {
  for (auto& [d, ev] : impl_->done) ev.synchronize();
}

bool DeviceCopies::empty() const { return impl_->devices.empty(); }

}  // namespace preempt::torch::internal
