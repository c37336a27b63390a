#!/usr/bin/env bash
# One device call that proves the current tree on a GPU: the GPU suite (test.sh), the JAX
# pool check and the context's cost (quick.sh), where that cost goes (bench/context_cost.py)
# and the pip package with its pytest plugin (pytest.sh). Each part's log goes to
# $LOGS/<part>.log; a part that runs past its time is cut and the rest still run.
#
#   LOGS=/tmp/logs scripts/gpu/session.sh [part ...]
#   parts: test quick cost pytest categories compile probe forkprobe ownpreflight repeat preflight1b
#   preflight1b-own
#   (repeat: the later fake steps repeated against run in full, llama1b b16 and ResNet-50 b128;
#   preflight1b: the 1e9 Llama's pre-flight that fits and the one that does not, then the latter
#   again with VRAMTRACE_FAKE_STEP_REPEAT=0 (its later steps run in full, not repeated): its
#   fake seconds and figures side by side; preflight1b-own: the one that does not fit, its steps
#   run by the program's own loop in copies of the process)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOGS=${LOGS:-$ROOT/gpu-out/logs}
mkdir -p "$LOGS"
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(cost test quick pytest)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/session.log"
for p in "${parts[@]}"; do
  start=$(date +%s)
  case $p in
    cost) timeout 90 python3 "$ROOT/bench/context_cost.py" cuda ;;
    test) timeout 240 "$ROOT/scripts/gpu/test.sh" ;;
    quick) timeout 150 "$ROOT/scripts/gpu/quick.sh" ;;
    pytest) timeout 150 "$ROOT/scripts/gpu/pytest.sh" ;;
    categories) timeout 300 "$ROOT/scripts/gpu/categories.sh" ;;
    compile) timeout 240 python3 "$ROOT/scripts/gpu/compile_check.py" --build "${BUILD:-$ROOT/build}" \
               --scripts "$ROOT/tests/gpu/real" --out "${OUT:-$ROOT/gpu-out}" ;;
    probe) timeout 60 python3 "$ROOT/tests/gpu/real/probe_context_toggle.py" ;;
    forkprobe) timeout 400 python3 "$ROOT/scripts/gpu/fork_probe.py" ${SHIM:-} ${FORK_LIB:-} ;;
    ownpreflight) OUT="$LOGS" timeout ${OWN_S:-480} "$ROOT/scripts/gpu/own_preflight.sh" ;;
    repeat) timeout 150 python3 "$ROOT/scripts/gpu/fake_step_speed.py" llama1b 16
            timeout 60 python3 "$ROOT/scripts/gpu/fake_step_speed.py" resnet50 128 ;;
    preflight1b) FITS=llama1b:8 OVER=llama1b:16 LIMIT_GIB=40 OUT="$LOGS/pf" \
                   timeout 200 "$ROOT/scripts/gpu/preflight.sh"
                 VRAMTRACE_FAKE_STEP_REPEAT=0 FITS=" " OVER=llama1b:16 LIMIT_GIB=40 \
                   OUT="$LOGS/pf-full" timeout 100 "$ROOT/scripts/gpu/preflight.sh"
                 # How each read the half batch: from its own fake step ("predicted at batch
                 # 8", the steps aligned) or scaled from the step at 16.
                 for f in pf pf-full; do
                   echo "$f: $("${BUILD:-$ROOT/build}/bin/vramtrace" whatif \
                     "$LOGS/$f/preflight/over-llama1b-b16" --scale-batch 0.5 --fraction 1 2>&1 |
                     grep -E 'reserved peak|predicted:' | tr '\n' ' ')"
                 done ;;
    preflight1b-own) VRAMTRACE_PREFLIGHT_STEP=program FITS=" " OVER=llama1b:16 LIMIT_GIB=40 \
                       OUT="$LOGS/pf-own" timeout 150 "$ROOT/scripts/gpu/preflight.sh" ;;
    *) echo "unknown part $p" ;;
  esac > "$LOGS/$p.log" 2>&1
  rc=$?
  echo "$p rc=$rc $(( $(date +%s) - start )) s" | tee -a "$LOGS/session.log"
done
