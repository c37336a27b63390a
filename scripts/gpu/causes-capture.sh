#!/usr/bin/env bash
# Runs each way memory runs out, and each remedy applied for real, under `vramtrace run` on a
# GPU, and keeps the run folders (traces, the PyTorch side channel, report.json, the program's
# own figures in stdout.txt) so that the analysis can be re-run on them anywhere:
#   BUILD=build-gpu OUT=/tmp/out scripts/gpu/causes-capture.sh [tag ...]
# Writes $OUT/runs/<tag>/ and, packed, $OUT/runs.tar.gz.NN (15 MiB pieces). Needs torch,
# torchvision, transformers, and the native program built into $BUILD/native_growth
# (nvcc -O2 -arch=sm_90 -o build-gpu/native_growth tests/gpu/real/native_growth.cu).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
VT=$BUILD/bin/vramtrace
R=$ROOT/tests/gpu/real
mkdir -p "$OUT/runs"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/runs/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__)' | tee -a "$OUT/runs/gpu.txt"

# tag  env...  --  program args
run() {
  local tag=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  [[ ${#want[@]} -gt 0 && ! " ${want[*]} " =~ " $tag " ]] && return
  if (( $(date +%s) - T0 > ${BUDGET_S:-100000} )); then echo "$tag skipped (BUDGET_S)" | tee -a "$OUT/runs/index.txt"; return; fi
  local start=$(date +%s)
  rm -rf "$OUT/runs/$tag"
  env "${envs[@]}" PYTHONUNBUFFERED=1 timeout 300 "$VT" run -o "$OUT/runs/$tag" -- "$@" \
    > "$OUT/runs/$tag.stdout.txt" 2>&1
  local rc=$?
  mv "$OUT/runs/$tag.stdout.txt" "$OUT/runs/$tag/stdout.txt" 2>/dev/null
  printf '%-28s rc=%-4s %5s s  %s\n' "$tag" "$rc" "$(( $(date +%s) - start ))" \
    "$(grep -h '^torch-figures\|^native-figures' "$OUT/runs/$tag/stdout.txt" 2>/dev/null | tail -1 | cut -c1-150)" \
    | tee -a "$OUT/runs/index.txt"
}
want=("$@")
T0=$(date +%s)  # BUDGET_S: no run starts after that many seconds, so that the packing still happens
P=python3
# A kept autograd graph in evaluation, and its remedy.
run eval-graph            BATCHES=16 -- $P "$R/gpt2_eval_graph.py"
run eval-graph-oom        BATCHES=16 LIMIT_GIB=24 -- $P "$R/gpt2_eval_graph.py"
run eval-graph-trainmode  BATCHES=6 EVAL=0 -- $P "$R/gpt2_eval_graph.py"
run eval-graph-fixed      BATCHES=16 LIMIT_GIB=24 NO_GRAD=1 -- $P "$R/gpt2_eval_graph.py"
run eval-losses           -- $P "$R/resnet_eval_losses.py"
run eval-losses-fixed     ITEM=1 -- $P "$R/resnet_eval_losses.py"
# Outputs kept across training steps.
run keep-logits           STEPS=10 -- $P "$R/gpt2_keep_logits.py"
run keep-logits-oom       STEPS=12 LIMIT_GIB=12 -- $P "$R/gpt2_keep_logits.py"
run keep-logits-fixed     STEPS=12 LIMIT_GIB=12 DETACH_CPU=1 -- $P "$R/gpt2_keep_logits.py"
# Native growth.
run native-growth         -- "$BUILD/native_growth"
run native-oom            KEEP_MIB=8192 -- "$BUILD/native_growth"
run native-fixed          KEEP_MIB=8192 FREE_KEPT=1 -- "$BUILD/native_growth"
# First-step deaths and their remedies measured for real.
run resnet-oom            BATCH=256 LIMIT_GIB=16 STEPS=2 -- $P "$R/resnet_oom.py"
run resnet-b128           BATCH=128 LIMIT_GIB=0 STEPS=2 -- $P "$R/resnet_oom.py"
run resnet-b128-16g       BATCH=128 LIMIT_GIB=16 STEPS=2 -- $P "$R/resnet_oom.py"
run resnet-amp            BATCH=256 LIMIT_GIB=0 STEPS=2 AMP=1 -- $P "$R/resnet_oom.py"
run resnet-ckpt           BATCH=256 LIMIT_GIB=0 STEPS=2 CKPT=layer1,layer2 -- $P "$R/resnet_oom.py"
run resnet-b256           BATCH=256 LIMIT_GIB=0 STEPS=2 -- $P "$R/resnet_oom.py"
run gpt2-oom              LAYERS=12 BATCH=32 LIMIT_GIB=16 STEPS=2 -- $P "$R/gpt2_train.py"
run gpt2-b16-16g          LAYERS=12 BATCH=16 LIMIT_GIB=16 STEPS=2 -- $P "$R/gpt2_train.py"
run gpt2-b16              LAYERS=12 BATCH=16 LIMIT_GIB=0 STEPS=2 -- $P "$R/gpt2_train.py"
run gpt2-b8               LAYERS=12 BATCH=8 LIMIT_GIB=0 STEPS=2 -- $P "$R/gpt2_train.py"
run gpt2-b32              LAYERS=12 BATCH=32 LIMIT_GIB=0 STEPS=2 -- $P "$R/gpt2_train.py"
# Fragmentation, and its remedy; memory held by another process.
run fragment-oom          -- $P "$R/fragment_oom.py"
run fragment-expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- $P "$R/fragment_oom.py"
run resnet-hog            BATCH=256 LIMIT_GIB=0 STEPS=2 HOG_GIB=127 -- $P "$R/resnet_oom.py"
# Pairs for the gate and the diff.
run gpt2-l6-b8            LAYERS=6 BATCH=8 STEPS=3 -- $P "$R/gpt2_train.py"
run gpt2-l6-b12           LAYERS=6 BATCH=12 STEPS=3 -- $P "$R/gpt2_train.py"
run resnet-b64            BATCH=64 LIMIT_GIB=0 STEPS=3 -- $P "$R/resnet_oom.py"
run resnet-b64-amp        BATCH=64 LIMIT_GIB=0 STEPS=3 AMP=1 -- $P "$R/resnet_oom.py"

# Packed without the HTML (re-made from the traces), in pieces that come back.
(cd "$OUT" && tar --exclude=report.html -czf - runs | split -b 15M -d - runs.tar.gz.)
ls -la "$OUT"
