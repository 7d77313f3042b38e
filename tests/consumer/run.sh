#!/usr/bin/env bash
# run.sh — builds and runs tests/consumer/consumer.cc as a project outside the repository would.
#
#   run.sh find_package     <preempt source dir> <preempt build dir> <work dir> <torch ON|OFF>
#     installs <preempt build dir> into <work dir>/prefix (cmake --install), then configures
#     tests/consumer/find_package against that prefix only, builds it and runs it.
#   run.sh add_subdirectory <preempt source dir> <preempt build dir> <work dir> <torch ON|OFF>
#     configures tests/consumer/add_subdirectory, which adds <preempt source dir> itself, builds it
#     and runs it. Its build directory is kept between runs (incremental: it compiles preempt).
# <torch ON|OFF>: whether preempt was built with LibTorch; ON requires the runtime part.
# CONSUMER_CMAKE_ARGS: extra arguments for configuring the consumer project; JOBS (default 2).
set -euo pipefail
[[ $# -eq 5 ]] || { sed -n '2,12p' "$0"; exit 2; }
mode=$1 src=$2 build=$3 work=$4 torch=$5
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jobs=${JOBS:-2}
mkdir -p "$work"
rm -rf "$work/prefix" "$work/run"
case "$mode" in
  find_package)
    cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
    echo "installed into $work/prefix: $(cd "$work/prefix" && find . -type f | wc -l) files"
    rm -rf "$work/build"
    # Only the install prefix is given: everything else must come from preemptConfig.cmake.
    cmake -S "$here/find_package" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCONSUMER_WITH_TORCH="$torch" ${CONSUMER_CMAKE_ARGS:-} ;;
  add_subdirectory)
    rm -f "$work/build/CMakeCache.txt"  # a fresh configure; the objects are kept
    cmake -S "$here/add_subdirectory" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
      -DPREEMPT_SOURCE_DIR="$src" -DCONSUMER_WITH_TORCH="$torch" ${CONSUMER_CMAKE_ARGS:-} ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
cmake --build "$work/build" -j"$jobs" --target consumer
PREEMPT_LOG_LEVEL=warn "$work/build/consumer" "$work/run"
