#!/usr/bin/env bash
# gpu-check.sh — checks of the CUDA/NCCL paths that cannot run on a CPU-only machine.
# Run on a machine with a GPU, the CUDA toolkit and a python3 that imports PyTorch (2.x):
#
#   scripts/gpu-check.sh [--build-dir DIR] [--deps DIR] [--out DIR] [--figures MIB] [--no-pytest]
#
# 1. configures with LibTorch from that PyTorch (torch.utils.cmake_prefix_path), PREEMPT_WITH_CUDA=ON
#    and PREEMPT_BUILD_GPU_CHECKS=ON (no other tests, benchmarks or examples), NCCL from
#    /usr/local/cuda or else from PyTorch's nvidia-nccl package, and builds tests/gpu/nccl_check,
#    tests/gpu/cuda_snapshot_check and preempt_runtime (which compiles the rest of the C++ API
#    against this LibTorch), keeping going past errors so that one run lists all of them;
# 2. runs nccl_check (raw NCCL on a 1-rank communicator: allreduce(MAX), drain of an idle stream,
#    drain of a stream held busy with a deadline) and cuda_snapshot_check (round trip, overlapped
#    device-to-host snapshot, exact resume on the GPU, then figures for a MIB MiB model, default 1024);
# 3. builds the Python package (pybind11 from that python3) in a second build directory and runs
#    tests/gpu/cuda_python_check.py and the Python tests that need no C++ test programs (about
#    100 s; --no-pytest leaves them out).
# --deps DIR: a prefix with liburing, xxHash, cereal and RapidJSON for a machine that lacks them
# (scripts/gpu-deps.sh makes one). --out DIR: the logs are copied there. One line per result at
# the end; exit status non-zero when a step failed. Expected wall time: 4–7 minutes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build-gpu"
deps=""
out=""
figures=1024
pytest=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(realpath -m "$2")"; shift 2 ;;
    --deps) deps="$(realpath "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --figures) figures="$2"; shift 2 ;;
    --no-pytest) pytest=0; shift ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
[[ $figures =~ ^[0-9]+$ ]] || { echo "gpu-check: --figures wants MiB, got '$figures'" >&2; exit 2; }
mkdir -p "$build"
logs="$build/logs"
mkdir -p "$logs"
declare -a summary
failed=0
result() {  # $1 = ok|FAIL|skip, $2 = what
  summary+=("$1 $2")
  [[ $1 == FAIL ]] && failed=1
  echo "== $1 $2"
}
finish() {
  echo "== summary"
  printf '%s\n' "${summary[@]}"
  [[ -n $out ]] && { mkdir -p "$out"; cp "$logs"/*.log "$out/" 2>/dev/null; }
  exit $failed
}

nvidia-smi -L || { echo "gpu-check: no GPU visible"; exit 2; }
py=${PYTHON:-python3}
"$py" -c 'import torch' || { echo "gpu-check: $py cannot import torch"; exit 2; }
torch_prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
echo "torch $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch.compiled_with_cxx11_abi())') at $torch_prefix"
echo "python $("$py" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
echo "$(cmake --version | head -1); $(c++ --version | head -1); nvcc $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1)"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
prefix="$torch_prefix"
if [[ -n $deps ]]; then
  prefix="$deps;$prefix"
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# NCCL: the toolkit's, else the one PyTorch's wheels bring (which has no unversioned libnccl.so).
nccl=()
if [[ ! -f /usr/local/cuda/include/nccl.h ]]; then
  nccl_root="$("$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)"
  if [[ -n $nccl_root && -f $nccl_root/include/nccl.h ]]; then
    mkdir -p "$build/nccl-lib"
    ln -sf "$(ls "$nccl_root"/lib/libnccl.so* | head -1)" "$build/nccl-lib/libnccl.so"
    nccl=(-DNCCL_INCLUDE_DIR="$nccl_root/include" -DNCCL_LIBRARY="$build/nccl-lib/libnccl.so")
    export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "nccl from $nccl_root"
  else
    echo "gpu-check: no nccl.h under /usr/local/cuda or in PyTorch's nvidia-nccl package"
  fi
fi

# ---- C++ ---------------------------------------------------------------------------------------
if cmake -S "$repo" -B "$build/cxx" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DCMAKE_PREFIX_PATH="$prefix" -DPREEMPT_WITH_TORCH=ON -DPREEMPT_WITH_CUDA=ON \
     -DPREEMPT_BUILD_GPU_CHECKS=ON -DPREEMPT_BUILD_TESTS=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF \
     -DPREEMPT_BUILD_EXAMPLES=OFF -DPREEMPT_WITH_PYTHON=OFF -DPREEMPT_INSTALL=OFF \
     -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc "${nccl[@]}" > "$logs/cxx-cmake.log" 2>&1; then
  result ok "configure (C++, LibTorch $("$py" -c 'import torch; print(torch.__version__)'))"
  start=$SECONDS
  cmake --build "$build/cxx" -j"$(nproc)" --target nccl_check cuda_snapshot_check preempt_runtime -- \
    $([[ ${#generator[@]} -gt 0 ]] && echo -k 0 || echo -k) > "$logs/cxx-build.log" 2>&1
  echo "build: $((SECONDS - start)) s"
  grep -E "error|Error" "$logs/cxx-build.log" | head -60
  for t in preempt_runtime nccl_check cuda_snapshot_check; do
    if find "$build/cxx" -name "$t" -type f -perm -u+x -o -name "lib$t.a" | grep -q .; then result ok "build $t"
    else result FAIL "build $t (see cxx-build.log)"; fi
  done
  if [[ -x $build/cxx/tests/gpu/nccl_check ]]; then
    timeout 120 "$build/cxx/tests/gpu/nccl_check" 2>&1 | tee "$logs/nccl_check.log"
    rc=${PIPESTATUS[0]}
    if [[ $rc -eq 0 ]]; then result ok "nccl_check"; else result FAIL "nccl_check (exit $rc)"; fi
  fi
  if [[ -x $build/cxx/tests/gpu/cuda_snapshot_check ]]; then
    PREEMPT_LOG_LEVEL=warn timeout 300 "$build/cxx/tests/gpu/cuda_snapshot_check" --dir "$build" \
      --figures "$figures" 2>&1 | tee "$logs/cuda_snapshot_check.log"
    rc=${PIPESTATUS[0]}
    if [[ $rc -eq 0 ]]; then result ok "cuda_snapshot_check"; else result FAIL "cuda_snapshot_check (exit $rc)"; fi
  fi
else
  tail -40 "$logs/cxx-cmake.log"
  result FAIL "configure (C++; see cxx-cmake.log)"
fi

# ---- Python ------------------------------------------------------------------------------------
# pybind11: the interpreter's (pip), else a system-wide CMake package.
pybind11=()
pybind11_dir="$("$py" -m pybind11 --cmakedir 2>/dev/null)" && pybind11=(-Dpybind11_DIR="$pybind11_dir")
if cmake -S "$repo" -B "$build/py" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
     -DPREEMPT_WITH_TORCH=OFF -DPREEMPT_WITH_CUDA=OFF -DPREEMPT_BUILD_TESTS=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF \
     -DPREEMPT_BUILD_EXAMPLES=OFF -DPREEMPT_INSTALL=OFF -DPREEMPT_WITH_PYTHON=ON "${pybind11[@]}" \
     -DPYTHON_EXECUTABLE="$(command -v "$py")" > "$logs/py-cmake.log" 2>&1 &&
   cmake --build "$build/py" -j"$(nproc)" --target preempt_python > "$logs/py-build.log" 2>&1 &&
   ls "$build/py/python/preempt"/_C*.so >/dev/null 2>&1; then
  result ok "build the Python package"
  export PREEMPT_PYTHON_DIR="$build/py/python"
  PYTHONPATH="$PREEMPT_PYTHON_DIR" PYTHONUNBUFFERED=1 PREEMPT_LOG_LEVEL=warn timeout 240 "$py" \
    "$repo/tests/gpu/cuda_python_check.py" --device cuda 2>&1 | tee "$logs/cuda_python_check.log"
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then result ok "cuda_python_check"; else result FAIL "cuda_python_check (exit $rc)"; fi
  [[ $pytest -eq 1 ]] || { result skip "pytest tests/python (--no-pytest)"; finish; }
  (cd "$repo/tests/python" && PREEMPT_LOG_LEVEL=warn timeout 240 "$py" -m pytest -q -p no:cacheprovider -x \
     test_api.py test_bad_use.py test_store_options.py test_exact_resume.py 2>&1) | tee "$logs/pytest.log" | tail -25
  rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then result ok "pytest tests/python (torch 2.x, GPU visible)"; else result FAIL "pytest tests/python (exit $rc)"; fi
else
  tail -30 "$logs/py-cmake.log" "$logs/py-build.log" 2>/dev/null
  result FAIL "build the Python package (see py-cmake.log, py-build.log)"
fi
finish
