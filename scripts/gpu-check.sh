#!/usr/bin/env bash
# gpu-check.sh — checks of the CUDA/NCCL paths that cannot run on a CPU-only machine.
# Run on a machine with a GPU, CUDA toolkit + NCCL under /usr/local/cuda and PyTorch (2.x).
#
#   scripts/gpu-check.sh [--build-dir build-gpu]
#
# 1. configures with LibTorch from the installed PyTorch (torch.utils.cmake_prefix_path),
#    PREEMPT_WITH_CUDA=ON and PREEMPT_BUILD_GPU_CHECKS=ON (no other tests, benchmarks or examples),
#    and builds tests/gpu/nccl_check (preempt_coord with its raw NCCL backend);
# 2. runs it: raw NCCL on one GPU (a 1-rank communicator): allreduce(MAX) through
#    NcclCollective, drain of an idle stream, and drain of a stream held busy by a host callback
#    for 5 s with a 1 s deadline (must return DeadlineExceeded while the stream is still busy and
#    abort the communicator); one line per check, non-zero exit on a failure.
# Expected wall time: 3–6 minutes (mostly the build).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build-gpu"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
nvidia-smi -L || { echo "gpu-check: no GPU visible"; exit 2; }
py=${PYTHON:-python3}
torch_prefix="$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')"
echo "torch $($py -c 'import torch; print(torch.__version__, torch.version.cuda)') at $torch_prefix"

cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DPREEMPT_WITH_TORCH=ON -DPREEMPT_WITH_CUDA=ON -DPREEMPT_BUILD_GPU_CHECKS=ON -DPREEMPT_BUILD_TESTS=OFF \
  -DPREEMPT_BUILD_BENCHMARKS=OFF -DPREEMPT_BUILD_EXAMPLES=OFF -DPREEMPT_WITH_PYTHON=OFF \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$build.cmake.log" 2>&1 ||
  { tail -30 "$build.cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target nccl_check > "$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }

rc=0
timeout 120 "$build/tests/gpu/nccl_check" || rc=$?
[[ $rc -eq 77 ]] && { echo "gpu-check: nccl_check found no usable GPU"; exit 1; }
exit $rc
