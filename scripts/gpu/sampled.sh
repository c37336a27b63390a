#!/usr/bin/env bash
# --torch=sampled on the GPU: what switching PyTorch's allocator trace off between the sampled
# iterations costs and keeps (bench/trace_gate_probe.py), real jobs under --torch=sampled and
# --torch=full side by side (scripts/gpu/sampled_job.py, checked by sampled_check.py against
# each other and PyTorch's own figures), what the default (--torch=auto) decides on each job and
# on bench/gpu_torch.py's launch-bound and GPU-bound steps (the I line: the trace's estimated
# cost of an iteration), and the launch-bound step's A/B with the arm default-sampled (the
# default without the trace, as sampled runs between its windows).
#   BUILD=/abs/build-gpu OUT=/tmp/out [PARTS="probe jobs decide cost"] [JOBS="resnet18 gpt2 gpt2:oom"]
#     [PIN=4-11] scripts/gpu/sampled.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/gpu-out}
PIN=${PIN:-4-11}
PARTS=${PARTS:-probe jobs decide cost}
JOBS=${JOBS:-resnet18 gpt2 gpt2:oom}
RUNS=$OUT/sampled
mkdir -p "$RUNS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
export PYTHONUNBUFFERED=1
if [[ " $PARTS " == *" probe "* ]]; then
  (cd "$ROOT/bench" && taskset -c "$PIN" python3 trace_gate_probe.py 40 2>&1 | tail -20)
fi
if [[ " $PARTS " == *" jobs "* ]]; then
  for job in $JOBS; do
    model=${job%%:*}
    extra=()
    [[ $job == *:oom ]] && extra=(OOM_AT=60)
    for mode in sampled full auto; do
      dir=$RUNS/$job-$mode
      rm -rf "$dir"
      env MODEL="$model" "${extra[@]}" "$BUILD/bin/vramtrace" run -o "$dir" --torch=$mode -- \
        python3 "$ROOT/scripts/gpu/sampled_job.py" > "$dir.log" 2>&1
      echo "$job $mode: rc=$? $(grep -c '^[OU]' "$dir"/*.torch 2>/dev/null | paste -sd' ') O/U lines"
    done
  done
  python3 "$ROOT/scripts/gpu/sampled_check.py" "$RUNS" $JOBS
fi
if [[ " $PARTS " == *" decide "* ]]; then
  for w in ${DECIDE:-launch_bound gpu_bound}; do
    dir=$RUNS/bench-$w
    rm -rf "$dir"
    taskset -c "$PIN" "$BUILD/bin/vramtrace" run -o "$dir" -- python3 "$ROOT/bench/gpu_torch.py" \
      "$w" > "$dir.log" 2>&1
    echo "$w default: rc=$? $(tail -1 "$dir.log")"
    # The same step without vramtrace and with the trace on throughout: one process each, a
    # rough end-to-end figure beside the A/B (cost part).
    echo "$w alone: $(taskset -c "$PIN" python3 "$ROOT/bench/gpu_torch.py" "$w" 2>&1 | tail -1)"
    rm -rf "$dir-full"
    taskset -c "$PIN" "$BUILD/bin/vramtrace" run -o "$dir-full" --torch=full -- \
      python3 "$ROOT/bench/gpu_torch.py" "$w" > "$dir-full.log" 2>&1
    echo "$w --torch=full: rc=$? $(tail -1 "$dir-full.log")"
  done
  for d in "$RUNS"/*-auto "$RUNS"/bench-*; do
    [[ -d $d ]] || continue  # the runs' .log files beside their folders
    python3 - "$d" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
for p in r["processes"]:
    t = p.get("torch_allocator_trace")
    if t:
        print("%-28s cost %s gaps %s" % (sys.argv[1].rsplit("/", 1)[-1], t.get("cost"),
                                         len(t.get("sampled", {}).get("gaps", []))))
PY
  done
fi
if [[ " $PARTS " == *" cost "* ]]; then
  VT_AB_PAIRS=${VT_AB_PAIRS:-60} VT_AB_STEPS=${VT_AB_STEPS:-3} python3 "$ROOT/bench/gpu_ab.py" \
    --build "$BUILD" --out "$OUT/ab" --repeats "${REPEATS:-3}" --pin "$PIN" \
    --workload launch_bound_ab --only null,default,default-sampled
fi
