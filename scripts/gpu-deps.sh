#!/usr/bin/env bash
# gpu-deps.sh — copies the build dependencies of preempt's C++ core (liburing, xxHash, cereal,
# RapidJSON: headers and shared libraries) from this machine's packages into one prefix, for a
# GPU machine that has CUDA and PyTorch but cannot install packages:
#
#   scripts/gpu-deps.sh DIR          # DIR/include, DIR/lib (regular files, no links)
#   scripts/gpu-check.sh --deps DIR  # on the GPU machine (same CPU architecture, glibc not older)
set -euo pipefail
dir=${1:?usage: scripts/gpu-deps.sh DIR}
lib=$(dirname "$(find /usr/lib /usr/lib64 -name 'liburing.so.2*' -print -quit 2>/dev/null)")
[[ -f /usr/include/liburing.h && -f /usr/include/xxhash.h && -d /usr/include/cereal && -d /usr/include/rapidjson && -d $lib ]] ||
  { echo "gpu-deps.sh: needs liburing-dev, libxxhash-dev, libcereal-dev and rapidjson-dev here" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/include" "$dir/lib"
cp -r /usr/include/liburing.h /usr/include/liburing /usr/include/xxhash.h /usr/include/xxh3.h \
  /usr/include/cereal /usr/include/rapidjson "$dir/include/"
for name in liburing.so liburing.so.2 libxxhash.so libxxhash.so.0; do cp -L "$lib/$name" "$dir/lib/$name"; done
du -sh "$dir"
