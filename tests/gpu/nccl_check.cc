// nccl_check — the raw NCCL backend (include/preempt/coord_nccl.h) on one real GPU.
//
// A 1-rank communicator: allreduce(MAX) through NcclCollective, drain of an idle stream, and drain
// of a stream held busy for 5 s by a host callback with a 1 s deadline, which must end in
// kDeadlineExceeded (before the stream would have finished) and abort the communicator.
// Prints one line per check; exit 0 all passed, 1 a check failed, 77 no usable GPU (ctest: skipped).
// Built only when CUDA and NCCL are found; scripts/gpu-check.sh builds and runs it.
#include <chrono>
#include <cstdio>
#include <thread>

#include "preempt/coord_nccl.h"

namespace {

constexpr int kSkip = 77;
constexpr double kBusyStreamS = 5;

void CUDART_CB HoldStreamBusy(void*) {
  std::this_thread::sleep_for(std::chrono::duration<double>(kBusyStreamS));
}

double SecondsSince(std::chrono::steady_clock::time_point start_at) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_at).count();
}

bool Check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  return ok;
}

}  // namespace

int main() {
  using preempt::Deadline;
  using preempt::Status;
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("skip: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkip;
  }
  if (!Check(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)")) return 1;
  ncclUniqueId id;
  if (!Check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId")) return 1;
  ncclComm_t comm;
  if (!Check(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank (1 rank)")) return 1;
  cudaStream_t stream;
  if (!Check(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate")) return 1;

  {
    preempt::NcclCollective coll(comm, stream, 0, 1);
    int64_t values[3] = {1, 0, -5000};
    Status st = coll.allreduce_max(values, 3, Deadline::InSeconds(10), preempt::UntilStop::kNo);
    if (!Check(st.ok() && values[0] == 1 && values[1] == 0 && values[2] == -5000,
               "NcclCollective::allreduce_max round trip")) {
      std::printf("     %s\n", st.to_string().c_str());
      return 1;
    }
    constexpr int kRounds = 1000;
    auto start_at = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) (void)coll.allreduce_max(values, 3, Deadline::InSeconds(10), preempt::UntilStop::kNo);
    std::printf("info allreduce(MAX) of 3 int64: %.1f us\n", SecondsSince(start_at) * 1e6 / kRounds);
  }

  preempt::NcclDrain idle(comm, stream);
  if (!Check(idle.drain(Deadline::InSeconds(5)).ok(), "drain of an idle stream")) return 1;

  cudaLaunchHostFunc(stream, HoldStreamBusy, nullptr);
  preempt::NcclDrain busy(comm, stream);
  auto start_at = std::chrono::steady_clock::now();
  Status st = busy.drain(Deadline::InSeconds(1));
  double waited_s = SecondsSince(start_at);
  std::printf("info busy drain returned after %.3f s: %s\n", waited_s, st.to_string().c_str());
  bool ok = Check(st.code() == preempt::StatusCode::kDeadlineExceeded, "busy stream: kDeadlineExceeded");
  // Not before its deadline, and without waiting for the stream (its callback is still running).
  ok &= Check(waited_s >= 0.9, "busy stream: waited until the deadline");
  ok &= Check(cudaStreamQuery(stream) == cudaErrorNotReady, "busy stream: returned while the stream was busy");
  ok &= Check(busy.comm() == nullptr, "communicator aborted (ncclCommAbort) past the deadline");
  cudaStreamSynchronize(stream);
  std::printf(ok ? "ALL OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
