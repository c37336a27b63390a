#!/usr/bin/env bash
# `vramtrace run --preflight` on real models (scripts/gpu/plan_job.py's, built from their
# constructors and configs): each job runs three training steps, once at a batch that fits (no
# cap) and once at one that does not under a per-process fraction of LIMIT_GIB (default 16);
# the fitting ones also run under plain `vramtrace run` for the pre-flight's cost in wall time.
# scripts/gpu/preflight_check.py prints, per run: the verdict said before the first step, the
# predicted reserved peak of the step against the one recorded over its two iterations (report.json's
# preflight) and the job's own max_memory_reserved, the error, the fake steps' seconds.
#
#   BUILD=$PWD/build-gpu OUT=/tmp/o scripts/gpu/preflight.sh
#   FITS="resnet101:64" OVER="resnet101:256" scripts/gpu/preflight.sh   (other cases)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
RUNS=$OUT/preflight
LIMIT=${LIMIT_GIB:-16}
FITS=${FITS:-"efficientnet_b0:64 resnet101:64 llama:4 bert_small:32"}
OVER=${OVER:-"efficientnet_b0:512 resnet101:256 llama:16 bert_small:128"}
mkdir -p "$RUNS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1

# one KIND MODEL BATCH LIMIT_GIB [run options...]: a run, its wall time in ms in DIR.ms
one() {
  local kind=$1 model=$2 batch=$3 limit=$4
  shift 4
  local dir=$RUNS/$kind-$model-b$batch
  rm -rf "$dir" "$dir.log" "$dir.times"
  local start
  start=$(date +%s%N)
  # Each line of the output also goes, with the seconds since the start when it came, to
  # DIR.times: the pre-flight's wall time as the user waits for it, its fake steps and the
  # launcher's replays together (preflight_check.py).
  MODEL=$model BATCH=$batch LIMIT_GIB=$limit "$BUILD/bin/vramtrace" run "$@" -o "$dir" -- \
    python3 "$ROOT/scripts/gpu/plan_job.py" run 2>&1 | python3 -u -c '
import sys, time
start = time.monotonic()
with open(sys.argv[1], "w") as log, open(sys.argv[2], "w") as times:
    for line in sys.stdin:
        log.write(line); log.flush()
        times.write("%.3f\t%s" % (time.monotonic() - start, line)); times.flush()
' "$dir.log" "$dir.times"
  local rc=${PIPESTATUS[0]}
  echo $(( ($(date +%s%N) - start) / 1000000 )) > "$dir.ms"
  echo "$rc" > "$dir.rc"
  echo "$kind $model b$batch (limit ${limit} GiB): rc=$rc $(cat "$dir.ms") ms"
  grep -E 'PRE-FLIGHT|pre-flight|ran three steps|OutOfMemoryError' "$dir.log" | cut -c1-400
}

for c in $FITS; do
  one fits "${c%%:*}" "${c##*:}" 0 --preflight
  one plain "${c%%:*}" "${c##*:}" 0
done
for c in $OVER; do
  one over "${c%%:*}" "${c##*:}" "$LIMIT" --preflight
done
python3 "$ROOT/scripts/gpu/preflight_check.py" "$RUNS" | tee "$OUT/preflight-check.txt"
