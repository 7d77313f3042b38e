// Raw NCCL drain / agreement (compiled only with CUDA + NCCL). See include/preempt/coord_nccl.h.
#include "preempt/coord_nccl.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "preempt/log.h"

namespace preempt {
namespace {

Status CudaError(cudaError_t e, const std::string& what) {
  return Status(StatusCode::kInternal, what + ": " + cudaGetErrorString(e));
}

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  nanosleep(&ts, nullptr);
}

}  // namespace

Status DrainNcclStream(ncclComm_t* comm, cudaStream_t stream, Deadline deadline, UntilStop until_stop,
                       const std::string& what) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return CudaError(e, "cudaEventCreate for " + what);
  e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    return CudaError(e, "cudaEventRecord for " + what);
  }
  int64_t sleep_ns = 10000;
  Status result;
  for (;;) {
    e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      result = CudaError(e, what + ": stream failed");
      break;
    }
    if (comm && *comm) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(*comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        result = Status(StatusCode::kAborted, what + ": NCCL async error: " + ncclGetErrorString(async));
        break;
      }
    }
    if (EffectiveDeadline(deadline, until_stop).expired()) {
      result = Status(StatusCode::kDeadlineExceeded, what + ": collectives still in flight at the drain deadline");
      break;
    }
    SleepNs(sleep_ns);
    sleep_ns = std::min<int64_t>(sleep_ns * 2, 1000000);
  }
  if (!result.ok() && comm && *comm) {
    PREEMPT_LOG_WARN("%s; calling ncclCommAbort", result.to_string().c_str());
    // Unblocks the stuck kernels and destroys the communicator, on a thread of its own: with the
    // stream held by other work (seen: a host function on it), ncclCommAbort itself waits for
    // the stream (NCCL 2.2x, CUDA 13), and the drain must return at its deadline.
    std::thread([c = *comm] { ncclCommAbort(c); }).detach();
    *comm = nullptr;
  }
  cudaEventDestroy(ev);
  return result;
}

Status NcclDrain::drain(Deadline deadline) {
  return DrainNcclStream(&comm_, stream_, deadline, UntilStop::kNo, "nccl drain");
}

NcclCollective::NcclCollective(ncclComm_t comm, cudaStream_t stream, int rank, int size)
    : comm_(comm), stream_(stream), rank_(rank), size_(size) {
  if (cudaMalloc(reinterpret_cast<void**>(&device_buf_), 16 * sizeof(int64_t)) != cudaSuccess) device_buf_ = nullptr;
  if (cudaMallocHost(reinterpret_cast<void**>(&host_buf_), 16 * sizeof(int64_t)) != cudaSuccess) host_buf_ = nullptr;
}

NcclCollective::~NcclCollective() {
  if (device_buf_) cudaFree(device_buf_);
  if (host_buf_) cudaFreeHost(host_buf_);
}

Status NcclCollective::allreduce_max(int64_t* values, int n, Deadline deadline, UntilStop until_stop) {
  if (!comm_) return Status(StatusCode::kAborted, "nccl communicator was aborted");
  if (!device_buf_ || !host_buf_ || n > 16) {
    return Status(StatusCode::kInvalidArgument, "nccl allreduce_max: no device/host buffer or n > 16");
  }
  std::copy(values, values + n, host_buf_);
  cudaError_t e = cudaMemcpyAsync(device_buf_, host_buf_, n * sizeof(int64_t), cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess) return CudaError(e, "nccl allreduce_max copy in");
  ncclResult_t r = ncclAllReduce(device_buf_, device_buf_, n, ncclInt64, ncclMax, comm_, stream_);
  if (r != ncclSuccess) return Status(StatusCode::kAborted, std::string("ncclAllReduce: ") + ncclGetErrorString(r));
  e = cudaMemcpyAsync(host_buf_, device_buf_, n * sizeof(int64_t), cudaMemcpyDeviceToHost, stream_);
  if (e != cudaSuccess) return CudaError(e, "nccl allreduce_max copy out");
  Status st = DrainNcclStream(&comm_, stream_, deadline, until_stop, "nccl allreduce(MAX)");
  if (st.ok()) std::copy(host_buf_, host_buf_ + n, values);
  return st;
}

}  // namespace preempt
