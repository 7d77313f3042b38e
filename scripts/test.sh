#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test:
#   1. release build, all tests (core, torch, runtime, scheduler, and the consumer projects that
#      build the library with find_package after `cmake --install` and with add_subdirectory)
#   2. ASan+UBSan build of the torch-free parts, their tests
#   3. TSan build of the torch-free parts, the threaded tests
#   4. libFuzzer on the manifest/COMMIT parsers for a fixed time
# Environment: JOBS (default: nproc), FUZZ_SECONDS (default 20), SKIP_SANITIZERS=1, SKIP_FUZZ=1.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
t_start=$(date +%s)
stage() { echo; echo "=== [test] $* ($(( $(date +%s) - t_start )) s elapsed)"; }

stage "dependencies"
./scripts/install-deps.sh

stage "release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$JOBS"
stage "Python package (scripts/install-python.sh: import preempt for /usr/bin/python3)"
./scripts/install-python.sh --build-dir build
(cd / && /usr/bin/python3 -c 'import preempt; print("[test] import preempt:", preempt.__file__)')
stage "release tests (the SLURM tests start and stop their own cluster)"
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 600

if [ -z "${SKIP_SANITIZERS:-}" ]; then
  stage "ASan+UBSan build (torch-free parts)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPREEMPT_SANITIZE=address,undefined \
        -DPREEMPT_WITH_TORCH=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  stage "ASan+UBSan tests"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$JOBS" -L core -LE slow --timeout 600

  stage "TSan build (torch-free parts)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPREEMPT_SANITIZE=thread \
        -DPREEMPT_WITH_TORCH=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-tsan -j"$JOBS"
  stage "TSan tests"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$JOBS" -L core -LE slow --timeout 600
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  stage "libFuzzer: manifest and COMMIT parsers, then the scheduler's inputs, ${FUZZ_SECONDS} s each"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPREEMPT_FUZZ=ON -DPREEMPT_SANITIZE=address,undefined \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPREEMPT_WITH_TORCH=OFF \
        -DPREEMPT_BUILD_TESTS=OFF -DPREEMPT_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-fuzz -j"$JOBS" --target fuzz_manifest fuzz_sched
  for target in fuzz_manifest:corpus fuzz_sched:corpus-sched; do
    corpus=$(mktemp -d)
    echo "-- ${target%%:*} (seeds: tests/fuzz/${target#*:})"
    cp "tests/fuzz/${target#*:}"/* "$corpus"/
    (cd build-fuzz && ./tests/fuzz/"${target%%:*}" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=1024 \
        -max_len=65536 -timeout=20 -print_final_stats=1 "$corpus" 2>&1 | tail -n 5)
    rm -rf "$corpus"
  done
fi

stage "all tests passed"
