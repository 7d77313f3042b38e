#!/usr/bin/env bash
# Installs the Debian packages preempt needs, only those missing. Safe to run repeatedly.
set -euo pipefail
PKGS=(cmake g++ clang libclang-rt-14-dev pkg-config make
      libtorch-dev libgloo-dev liburing-dev libcereal-dev rapidjson-dev libxxhash-dev
      libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev python3-torch python3-pytest
      python3-matplotlib fio
      slurm-wlm munge)  # the SLURM tests (tests/slurm) run a private cluster from these
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "[deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y "${missing[@]}" >/tmp/preempt-apt.log 2>&1; then
  echo "[deps] apt-get install failed; refreshing package lists and retrying"
  $SUDO apt-get update >>/tmp/preempt-apt.log 2>&1
  $SUDO apt-get install -y "${missing[@]}" >>/tmp/preempt-apt.log 2>&1 || {
    tail -20 /tmp/preempt-apt.log; exit 1; }
fi
echo "[deps] installed ${#missing[@]} packages"
