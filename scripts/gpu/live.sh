#!/usr/bin/env bash
# A real PyTorch training run watched live on a GPU (live_train.py: ResNet-50, random images):
#   1. its median step time plain, under `vramtrace run`, and under `vramtrace run --serve` with
#      /report.json fetched every 2 s (the ratios are the cost of watching);
#   2. the answers fetched while it ran (live_check.py polls);
#   3. a snapshot of a paused moment (`vramtrace snapshot`) against torch.cuda.memory_allocated()
#      and memory_reserved() at that moment (live_check.py snapshot).
#   BUILD=/abs/build scripts/gpu/live.sh [OUT]      (STEPS, BATCH, PYTHON to change the job;
#                                                   PARTS="step snapshot": which parts)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${BUILD:-$ROOT/build}" && pwd)
VT=$BUILD/bin/vramtrace
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
STEPS=${STEPS:-200}
BATCH=${BATCH:-64}
PY=${PYTHON:-python3}
HERE=$ROOT/scripts/gpu
fail=0
step_of() { grep -o 'median step [0-9.]*' "$1" | awk '{print $3}'; }

PARTS=${PARTS:-step snapshot}
if [[ $PARTS == *step* ]]; then
echo "== live: step time, plain / vramtrace run / vramtrace run --serve (polled every 2 s)"
"$PY" "$HERE/live_train.py" "$STEPS" "$BATCH" >"$OUT/plain.txt" 2>&1 || fail=1
"$VT" run --no-progress -o "$OUT/run" --force -- "$PY" "$HERE/live_train.py" "$STEPS" "$BATCH" \
  >"$OUT/run.txt" 2>&1 || fail=1
"$VT" run --no-progress --serve -o "$OUT/served" --force -- \
  "$PY" "$HERE/live_train.py" "$STEPS" "$BATCH" >"$OUT/served.txt" 2>"$OUT/served.err" &
job=$!
"$PY" "$HERE/live_check.py" poll "$OUT/served.err" "$OUT/polls" "$job" >"$OUT/polls.txt" 2>&1
wait "$job" || fail=1
cat "$OUT/polls.txt" | tail -5
p=$(step_of "$OUT/plain.txt"); r=$(step_of "$OUT/run.txt"); s=$(step_of "$OUT/served.txt")
echo "median step: plain $p s, run $r s, run --serve (polled) $s s"
"$PY" -c "p,r,s=$p,$r,$s; print('ratio run/plain %.3f, serve/plain %.3f, serve/run %.3f' % (r/p, s/p, s/r))" || fail=1
"$PY" "$HERE/live_check.py" polls "$OUT/polls" "$OUT/served/report.json" || fail=1
fi
[[ $PARTS == *snapshot* ]] || exit $fail

echo "== live: a snapshot of a paused moment against PyTorch's own figures"
WORK=$OUT/work
rm -rf "$WORK" && mkdir -p "$WORK"
"$VT" run --no-progress -o "$OUT/snap" --force -- \
  "$PY" "$HERE/live_train.py" 60 "$BATCH" "$WORK" 30 >"$OUT/snap.txt" 2>&1 &
job=$!
for _ in $(seq 1200); do [[ -f $WORK/ready.json ]] && break; sleep 0.1; done
/usr/bin/time -f "snapshot took %e s" "$VT" snapshot "$OUT/snap" 2>&1 | tail -3 || fail=1
touch "$WORK/go"
wait "$job" || fail=1
"$PY" "$HERE/live_check.py" snapshot "$OUT/snap/snapshot-1/report.json" "$WORK/ready.json" || fail=1
exit $fail
