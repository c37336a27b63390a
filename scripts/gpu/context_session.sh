#!/usr/bin/env bash
# One call on the GPU machine for a change of the start-up hook's context: the launch-bound
# step's in-process A/B (bench/gpu_ab.py) of the context as it is here against another version
# of the hook (HOOK=FILE, e.g. `git show REV:python/vramtrace/_hook/sitecustomize.py`), the null
# arm and the default as a whole; then the real PyTorch checks of the GPU suite that read the
# hook's marks (scripts/gpu/check.py's torch part: iterations, phases, categories, modules).
#
#   BUILD=/abs/build OUT=/tmp/out HOOK=/abs/old_sitecustomize.py scripts/gpu/context_session.sh
#   PARTS (default ab,torch; parts: the context's cost by part; pytest: scripts/gpu/pytest.sh;
#   ckpt: a real checkpointed ResNet-50 recorded), REPEATS (3), VT_AB_PAIRS (16), PIN (4-11)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
PARTS=${PARTS:-ab,torch}
export VT_AB_PAIRS=${VT_AB_PAIRS:-16}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
for part in ${PARTS//,/ }; do
  case "$part" in
    ab)
      cases=null,context,default
      [[ -n ${HOOK:-} ]] && cases=null,context,context-other,default
      VT_AB_HOOK=${HOOK:-} python3 "$ROOT/bench/gpu_ab.py" --build "$BUILD" --out "$OUT/ab" \
        --repeats "${REPEATS:-3}" --pin "${PIN:-4-11}" --workload launch_bound_ab --only "$cases" ;;
    torch)
      OUT_DIR=$OUT/suite BUILD=$BUILD bash "$ROOT/scripts/gpu/test.sh" 2>&1 | tail -60 ;;
    parts)
      # Where the context's cost goes: each part switched alone, and the Python calls it adds.
      (cd "$ROOT/bench" && timeout 240 python3 context_parts.py "${VT_AB_PAIRS}" 2>&1 | tail -36) ;;
    pytest)
      OUT_DIR=$OUT/pytest BUILD=$BUILD timeout 300 bash "$ROOT/scripts/gpu/pytest.sh" 2>&1 | tail -30 ;;
    ckpt)
      # ResNet-50 at batch 128 with layer1-4 checkpointed, recorded for real: its requests
      # against those of the step the hook runs on fake tensors with the same change.
      VRAMTRACE_TORCH_PREDICT=off MODEL=resnet50 BATCH=128 LIMIT_GIB=0 STEPS=3 CKPT=1 \
        "$BUILD/bin/vramtrace" run -o "$OUT/ckpt" -- python3 "$ROOT/scripts/gpu/first_step_job.py" \
        > "$OUT/ckpt.log" 2>&1
      echo "ckpt: rc=$?"; grep torch-figures "$OUT/ckpt.log"
      rm -f "$OUT/ckpt/report.html" ;;
  esac
done
