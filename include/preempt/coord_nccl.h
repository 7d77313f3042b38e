// preempt/coord_nccl.h — drain and stop agreement over a raw NCCL communicator and CUDA stream.
//
// For trainers that drive NCCL themselves (no c10d). Compiled only when CUDA and NCCL are found
// (PREEMPT_HAVE_CUDA); never needed at run time on a CPU machine.
//
// NcclDrain::drain records a CUDA event on the communicator's stream (after every collective
// the trainer enqueued there) and polls cudaEventQuery and ncclCommGetAsyncError until the event
// completes or the deadline passes. Past the deadline — a peer never joined a collective, the
// stream is stuck — it calls ncclCommAbort, which makes the stuck kernels return, and reports
// kDeadlineExceeded. After an abort the communicator is gone (comm() returns nullptr). The abort
// runs on a thread of its own, so the drain returns at its deadline even when ncclCommAbort waits.
//
// NcclCollective implements the coordinator's allreduce(MAX) of a few int64 with a small device
// buffer and a pinned host buffer it owns, on the same stream; waits are the same event poll with
// the same abort. The caller's values are copied in before and out after a completed wait only.
//
// Thread-safety: one thread at a time (the training thread).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "preempt/coord.h"

namespace preempt {

// Waits for all work enqueued on `stream` until `deadline`; aborts `*comm` past it (then sets
// *comm = nullptr). Polling interval grows from 10 µs to 1 ms.
Status DrainNcclStream(ncclComm_t* comm, cudaStream_t stream, Deadline deadline, UntilStop until_stop,
                       const std::string& what);

class NcclDrain : public DrainSource {
 public:
  // Does not take ownership of `comm` or `stream` unless abort() runs (then the comm is destroyed).
  NcclDrain(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {}
  Status drain(Deadline deadline) override;
  std::string name() const override { return "nccl stream"; }
  ncclComm_t comm() const { return comm_; }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
};

class NcclCollective : public Collective {
 public:
  NcclCollective(ncclComm_t comm, cudaStream_t stream, int rank, int size);
  ~NcclCollective() override;
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Status allreduce_max(int64_t* values, int n, Deadline deadline, UntilStop until_stop) override;
  std::string name() const override { return "nccl"; }
  ncclComm_t comm() const { return comm_; }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
  int64_t* device_buf_ = nullptr;  // 16 int64
  int64_t* host_buf_ = nullptr;    // 16 int64, pinned (the copy out must not block the host)
};

}  // namespace preempt
