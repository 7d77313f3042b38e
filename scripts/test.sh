#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test:
#   1. release build, all tests (core, torch, runtime, scheduler, and the consumer projects that
#      build the library with find_package after `cmake --install` and with add_subdirectory)
#   2. ASan+UBSan build of the torch-free parts (clang), their tests
#   3. TSan build of the tests that run threads (label `threads`), those tests
#   4. libFuzzer on the manifest/COMMIT parsers and the scheduler's inputs for a fixed time, built
#      in the ASan+UBSan tree of step 2
# Debug information is line tables only (-g1): backtraces and sanitizer reports keep file:line,
# and the release build takes about a third less time than with full -g (740 -> 490 s on 2 cores).
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
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build -j"$JOBS"
stage "Python package (scripts/install-python.sh: import preempt for /usr/bin/python3)"
./scripts/install-python.sh --build-dir build
(cd / && /usr/bin/python3 -c 'import preempt; print("[test] import preempt:", preempt.__file__)')
stage "release tests (the SLURM tests start and stop their own cluster)"
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 600

# A sanitizer build of the torch-free parts: Debug keeps assertions; -O1 keeps the sanitized tests
# and the fuzzers fast.
sanitizer_tree() {  # <dir> <sanitizers> <extra cmake arguments...>
  local dir=$1 sanitize=$2; shift 2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
        -DPREEMPT_SANITIZE="$sanitize" -DPREEMPT_WITH_TORCH=OFF -DPREEMPT_WITH_PYTHON=OFF \
        -DPREEMPT_BUILD_BENCHMARKS=OFF -DPREEMPT_BUILD_EXAMPLES=OFF "$@" >/dev/null
}

# The ASan+UBSan tree is clang's, so that the libFuzzer targets of the last step are built in it too.
if [ -z "${SKIP_SANITIZERS:-}" ] || [ -z "${SKIP_FUZZ:-}" ]; then
  stage "ASan+UBSan build (torch-free parts, clang)"
  sanitizer_tree build-asan address,undefined -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPREEMPT_FUZZ=ON
fi

if [ -z "${SKIP_SANITIZERS:-}" ]; then
  cmake --build build-asan -j"$JOBS"
  stage "ASan+UBSan tests"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$JOBS" -L core -LE slow --timeout 600

  stage "TSan build (the tests that run threads)"
  sanitizer_tree build-tsan thread
  cmake --build build-tsan -j"$JOBS" --target preempt_threaded_tests
  stage "TSan tests"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$JOBS" -L threads -LE slow --timeout 600
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  stage "libFuzzer: manifest and COMMIT parsers, then the scheduler's inputs, ${FUZZ_SECONDS} s each"
  cmake --build build-asan -j"$JOBS" --target fuzz_manifest fuzz_sched
  for target in fuzz_manifest:corpus fuzz_sched:corpus-sched; do
    corpus=$(mktemp -d)
    echo "-- ${target%%:*} (seeds: tests/fuzz/${target#*:})"
    cp "tests/fuzz/${target#*:}"/* "$corpus"/
    (cd build-asan && ./tests/fuzz/"${target%%:*}" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=1024 \
        -max_len=65536 -timeout=20 -print_final_stats=1 "$corpus" 2>&1 | tail -n 5)
    rm -rf "$corpus"
  done
fi

stage "all tests passed"
