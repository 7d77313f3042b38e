#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: a data-parallel LibTorch training run
# that is preempted with SIGTERM, checkpoints within its grace period, and resumes exactly.
# Built without LibTorch (no examples/ddp_trainer), it runs the store demo instead (multi-GiB save +
# restore).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
if [ -x build/examples/ddp_trainer ]; then
  exec ./scripts/demo-preempt.sh "$@"
fi
exec ./build/src/tools/preempt-store-demo "$@"
