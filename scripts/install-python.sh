#!/usr/bin/env bash
# Builds the `preempt` Python package against the system's torch and installs it for
# /usr/bin/python3, without PyPI:
#
#   scripts/install-python.sh                 # build in ./build, copy into /usr/local (dist-packages)
#   scripts/install-python.sh --develop       # instead, a .pth file pointing at ./build/python
#   scripts/install-python.sh --prefix DIR --build-dir DIR --python /usr/bin/python3
#
# Afterwards `import preempt` works from any directory. The native module links only preempt's
# torch-free core, so the same build serves whichever torch that interpreter imports.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
PREFIX=/usr/local
PYTHON=/usr/bin/python3
DEVELOP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD="$(realpath -m "$2")"; shift 2 ;;
    --prefix) PREFIX="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    --develop) DEVELOP=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install-python.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

"$PYTHON" -c "import torch" 2>/dev/null || {
  echo "install-python.sh: $PYTHON cannot import torch (Debian: apt-get install python3-torch)" >&2; exit 1; }

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPYTHON_EXECUTABLE="$PYTHON"
fi
cmake --build "$BUILD" -j"$(nproc)" --target preempt_python
PKG="$BUILD/python/preempt"
ls "$PKG"/_C*.so >/dev/null 2>&1 || { echo "install-python.sh: $PKG/_C*.so was not built" >&2; exit 1; }

# Debian's interpreter reads /usr/local/lib/python3.X/dist-packages (scheme posix_local).
SITE="$("$PYTHON" - "$PREFIX" <<'EOF'
import sys, sysconfig
prefix = sys.argv[1]
if "posix_local" in sysconfig.get_scheme_names():  # Debian: <prefix>/lib/python3.X/dist-packages
    print(f"{prefix}/lib/python{sys.version_info[0]}.{sys.version_info[1]}/dist-packages")
else:
    print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
EOF
)"
mkdir -p "$SITE"
if [[ $DEVELOP == 1 ]]; then
  echo "$BUILD/python" > "$SITE/preempt.pth"
  echo "install-python.sh: $SITE/preempt.pth -> $BUILD/python"
else
  rm -f "$SITE/preempt.pth"
  rm -rf "$SITE/preempt.tmp"
  cp -r "$PKG" "$SITE/preempt.tmp"
  find "$SITE/preempt.tmp" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$SITE/preempt"
  mv "$SITE/preempt.tmp" "$SITE/preempt"
  echo "install-python.sh: installed $SITE/preempt"
fi
(cd / && PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c "import preempt; print('import preempt OK:', preempt.__file__)")
