#!/usr/bin/env bash
# gpu-check.sh — checks of the CUDA/NCCL paths that cannot run on a CPU-only machine.
# Run on a machine with a GPU, CUDA toolkit + NCCL under /usr/local/cuda and PyTorch (2.x).
#
#   scripts/gpu-check.sh [--build-dir build-gpu] [--quick]
#
# 1. configures with LibTorch from the installed PyTorch (torch.utils.cmake_prefix_path) and
#    PREEMPT_WITH_CUDA=ON, builds preempt_coord (raw NCCL backend) and a small check program;
# 2. raw NCCL on one GPU (a 1-rank communicator): allreduce(MAX) through NcclCollective, drain of
#    a finished stream (OK, fast), and drain of a stream held busy by a host callback for 5 s
#    with a 1 s deadline (must return DeadlineExceeded after ~1 s and abort the communicator);
# 3. prints one line per check and exits non-zero on the first failure.
# Expected wall time: 3–6 minutes (mostly the build).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build-gpu"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --quick) shift ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
nvidia-smi -L || { echo "gpu-check: no GPU visible"; exit 2; }
py=${PYTHON:-python3}
torch_prefix="$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')"
echo "torch $($py -c 'import torch; print(torch.__version__, torch.version.cuda)') at $torch_prefix"

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DPREEMPT_WITH_TORCH=ON -DPREEMPT_WITH_CUDA=ON -DPREEMPT_BUILD_TESTS=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF \
  -DPREEMPT_WITH_PYTHON=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$build.cmake.log" 2>&1 ||
  { tail -30 "$build.cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target preempt_coord > "$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }

check_dir="$build/gpu-check"
mkdir -p "$check_dir"
cat > "$check_dir/nccl_check.cc" <<'EOF'
#include <cstdio>
#include <chrono>
#include <thread>
#include "preempt/coord_nccl.h"
using namespace preempt;
static void CUDART_CB Busy(void*) { std::this_thread::sleep_for(std::chrono::seconds(5)); }
#define CHECK(c, msg) do { if (!(c)) { std::printf("FAIL %s\n", msg); return 1; } std::printf("ok   %s\n", msg); } while (0)
int main() {
  cudaSetDevice(0);
  ncclUniqueId id; ncclGetUniqueId(&id);
  ncclComm_t comm; CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank (1 rank)");
  cudaStream_t stream; cudaStreamCreate(&stream);
  {
    NcclCollective coll(comm, stream, 0, 1);
    int64_t v[3] = {1, 0, -5000};
    auto t0 = std::chrono::steady_clock::now();
    Status st = coll.allreduce_max(v, 3, Deadline::InSeconds(10), UntilStop::kNo);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    CHECK(st.ok() && v[0] == 1 && v[2] == -5000, "NcclCollective::allreduce_max round trip");
    for (int i = 0; i < 100; ++i) (void)coll.allreduce_max(v, 3, Deadline::InSeconds(10), UntilStop::kNo);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) (void)coll.allreduce_max(v, 3, Deadline::InSeconds(10), UntilStop::kNo);
    us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
    std::printf("info nccl agreement allreduce(MAX) of 3 int64: %.1f us\n", us);
  }
  NcclDrain idle(comm, stream);
  CHECK(idle.drain(Deadline::InSeconds(5)).ok(), "drain of an idle stream");
  cudaLaunchHostFunc(stream, Busy, nullptr);  // the stream stays busy for 5 s
  NcclDrain busy(comm, stream);
  auto t0 = std::chrono::steady_clock::now();
  Status st = busy.drain(Deadline::InSeconds(1));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("info busy drain returned after %.3f s: %s\n", s, st.ToString().c_str());
  CHECK(st.code() == StatusCode::kDeadlineExceeded, "busy stream: DeadlineExceeded");
  CHECK(s >= 0.95 && s < 1.5, "busy stream: returned at the 1 s deadline");
  CHECK(busy.comm() == nullptr, "communicator aborted (ncclCommAbort) past the deadline");
  cudaStreamSynchronize(stream);
  std::printf("ALL OK\n");
  return 0;
}
EOF
cat > "$check_dir/CMakeLists.txt" <<'EOF'
add_executable(nccl_check nccl_check.cc)
target_link_libraries(nccl_check PRIVATE preempt_coord)
EOF
# Build the check program against the already configured tree (no edit of the project's CMake).
g++ -std=c++17 -O1 "$check_dir/nccl_check.cc" -o "$check_dir/nccl_check" -I"$repo/include" -I/usr/local/cuda/include \
  $(find "$build" -name libpreempt_coord.a | head -1) $(find "$build" -name libpreempt_core.a | head -1) \
  -L/usr/local/cuda/lib64 -lnccl -lcudart -luring -lxxhash -lpthread \
  -Wl,-rpath,/usr/local/cuda/lib64 2> "$check_dir/build.err" || {
  # preempt_coord also holds the c10d adapters; link LibTorch when the plain link needs it.
  tp="$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  g++ -std=c++17 -O1 "$check_dir/nccl_check.cc" -o "$check_dir/nccl_check" -I"$repo/include" -I/usr/local/cuda/include \
    -I"$tp/include" -I"$tp/include/torch/csrc/api/include" \
    $(find "$build" -name libpreempt_coord.a | head -1) $(find "$build" -name libpreempt_core.a | head -1) \
    -L"$tp/lib" -ltorch -ltorch_cpu -lc10 -L/usr/local/cuda/lib64 -lnccl -lcudart -luring -lxxhash -lpthread \
    -Wl,-rpath,"$tp/lib" -Wl,-rpath,/usr/local/cuda/lib64 || { cat "$check_dir/build.err"; exit 1; }
}
timeout 120 "$check_dir/nccl_check"
