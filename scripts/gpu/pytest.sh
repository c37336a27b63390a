#!/usr/bin/env bash
# The Python package on a GPU: installs it with pip into a fresh virtual environment (seeing the
# machine's PyTorch), runs the pytest plugin on tests/gpu/test_torch_plugin.py (with and without
# pytest-xdist) and checks its figures, then profiles a PyTorch step with every CUDA Toolkit
# folder hidden (a private mount namespace: nothing is moved), so that only the driver and
# PyTorch's pip wheels provide CUDA, and says which CUPTI was used.
#
#   scripts/gpu/pytest.sh        # from the repository root; needs a build (BUILD, default ./build)
#   COMPILE=1 scripts/gpu/pytest.sh   # pip compiles the package itself instead of packaging BUILD
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-$ROOT/gpu-out/pytest}
rm -rf "$OUT_DIR" && mkdir -p "$OUT_DIR"
"$PYTHON" -c "import torch; assert torch.cuda.is_available(); print('torch', torch.__version__)" ||
  { echo "gpu-pytest: PyTorch with CUDA is needed" >&2; exit 2; }

VENV=$OUT_DIR/venv
"$PYTHON" -m venv --system-site-packages "$VENV" || exit 2
if [[ ${COMPILE:-0} == 1 ]]; then
  setting=(--config-settings "build-dir=$BUILD/pip-build")
else
  setting=(--config-settings "prebuilt=$BUILD")
fi
"$VENV/bin/python" -m pip install --no-index --quiet "${setting[@]}" "$ROOT" || exit 2
# PYDEPS: a folder of pure-Python packages (pytest, pytest-xdist and their dependencies) for a
# machine without a package index: put on the virtual environment's path after everything else
# (a pytest beside PyTorch wins, with the plugins made for it).
# The interpreter's own packages (PyTorch in its virtual environment, which a new environment
# made from it does not inherit) stay visible.
site=$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")
"$PYTHON" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" \
  > "$site/vramtrace-torch.pth"
if [[ -n ${PYDEPS:-} ]]; then
  "$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])" |
    { read -r sp; echo "$(cd "$PYDEPS" && pwd)" > "$sp/zz-vramtrace-pydeps.pth"; }
fi
"$VENV/bin/python" -c "import pytest" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet pytest || exit 2
"$VENV/bin/python" -c "import xdist" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet pytest-xdist ||
  echo "gpu-pytest: pytest-xdist could not be installed; the xdist run is skipped"

exec "$VENV/bin/python" "$ROOT/scripts/gpu/pytest_check.py" "$ROOT" "$VENV" "$OUT_DIR"
