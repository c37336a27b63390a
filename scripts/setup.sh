#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test vramtrace, then configures and
# builds it in ./build. Safe to run again: it installs only what is missing.
#   scripts/setup.sh              (as root, or a user with sudo) everything: what tests/test.sh runs
#   scripts/setup.sh --with-fuzz  also clang-14 and libFuzzer, for tests/fuzz.sh (tests/test.sh)
#   scripts/setup.sh --demo       only what scripts/demo.sh needs: the command (with its --serve
#                                 module), the library and the CPU stand-in for CUDA; no test
#                                 binaries, no test-only packages (chromium, pytest)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
mode=all
case ${1:-} in
  --with-fuzz) mode=fuzz ;;
  --demo) mode=demo ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--with-fuzz | --demo]" >&2; exit 2 ;;
esac

packages=(cmake g++ make libspdlog-dev nlohmann-json3-dev catch2 libcli11-dev libzstd-dev
  libdw-dev libelf-dev zlib1g-dev liblzma-dev libbz2-dev libcpp-httplib-dev pkg-config)
# The tests': the HTML report in chromium, the Python package and plugin (patchelf: the wheel
# bundles the libraries of the --serve module), the schema, the style.
[[ $mode != demo ]] && packages+=(clang-format-14 chromium python3-venv python3-pytest
  python3-pytest-xdist python3-jsonschema patchelf)
[[ $mode == fuzz ]] && packages+=(clang-14 libclang-rt-14-dev)
command -v npm >/dev/null || packages+=(nodejs npm)
command -v python3 >/dev/null || packages+=(python3)  # the reliability tests are Python scripts
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x $CUDA_HOME/bin/nvcc || ! -f $CUDA_HOME/include/cupti.h ]]; then
  echo "setup: the CUDA Toolkit 13 (nvcc, headers and CUPTI) was not found in $CUDA_HOME." >&2
  echo "       Install cuda-toolkit-13-0 from NVIDIA's repository, or set CUDA_HOME." >&2
  exit 1
fi

# The HTML report embeds uPlot; the HTML tests drive chromium with playwright-core.
(cd report/web && npm ci --no-audit --no-fund --loglevel=error)

# The demo's configure sets up no test (nor the CUDA compiler the test programs need); the test
# command's turns them on again in the same build/, where what the demo built stays built.
tests=ON
[[ $mode == demo ]] && tests=OFF
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$CUDA_HOME" \
  -DVRAMTRACE_BUILD_TESTS=$tests >/dev/null
if [[ $mode == demo ]]; then
  cmake --build build -j"$(nproc)" --target vramtrace vramtrace_preload vramtrace_http \
    vt_standin_cuda vt_standin_cudart vt_standin_cupti
else
  cmake --build build -j"$(nproc)"
fi
echo "setup: built build/bin/vramtrace and build/lib/libvramtrace.so"
