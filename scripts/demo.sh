#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: a data-parallel LibTorch training run
# that is preempted with SIGTERM, checkpoints within its grace period, and resumes exactly.
# Until that demo is built, it falls back to the store demo (multi-GiB save + restore).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
if [ -x scripts/demo-preempt.sh ] && [ -x build/tests/runtime/preempt_trainer_worker ]; then
  exec ./scripts/demo-preempt.sh "$@"
fi
exec ./build/src/tools/preempt-store-demo "$@"
