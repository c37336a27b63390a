#!/usr/bin/env bash
# Writes what one build's Python start-up hook records of the stand-in PyTorch programs
# (tests/programs/py_torch_*.py on tests/programs/fake_torch), in a form two builds can be diffed
# by: each run's side channel (vramtrace.<pid>.torch) and the command's output, with what
# differs from run to run masked (times, process ids, the hook's temporary folder and its own
# line numbers, the seconds the fake steps took). A change of the hook meant to keep behaviour
# (a refactoring) shows an empty diff:
#
#   scripts/ci/hook_identity.sh BUILD_A OUT_A
#   scripts/ci/hook_identity.sh BUILD_B OUT_B
#   diff -r OUT_A OUT_B
#
# Each program runs four ways: the full allocator trace, the sampled one (--torch=sampled),
# `vramtrace plan` and `run --preflight`. The frames between the phases are kept whatever they
# cost (VRAMTRACE_TORCH_LINES=1): their budget is judged on the iteration's time, which differs
# from run to run.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(realpath "$1")
out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(realpath "$out")
work=${TMPDIR:-/tmp}/vt-hook-identity-work

for program in "$src"/tests/programs/py_torch_*.py; do
  name=$(basename "$program" .py)
  for mode in full sampled plan preflight; do
    dest=$out/$name.$mode
    rm -rf "$dest" "$work" && mkdir -p "$dest" "$work"
    case $mode in
      full | sampled) command=(run -o "$work/run") ;;
      plan) command=(plan -o "$work/run") ;;
      preflight) command=(run --preflight -o "$work/run") ;;
    esac
    trace=full
    [[ $mode == sampled ]] && trace=sampled
    rc=0
    env LD_LIBRARY_PATH="$build/standin" FAKE_TORCH_CUDART="$build/standin/libcudart.so.13" \
      PYTHONPATH="$src/tests/programs/fake_torch" VRAMTRACE_STANDIN_DEVICE_BYTES=$((80 << 20)) \
      VRAMTRACE_TORCH_TRACE=$trace VRAMTRACE_TORCH_LINES=1 \
      timeout 120 "$build/bin/vramtrace" "${command[@]}" -- python3 "$program" \
      >"$work/out.txt" 2>&1 || rc=$?
    echo "$rc" >"$dest/rc"
    # Times (ns and us since the epoch), the hook's temporary folder and its own line numbers,
    # process ids, and the fake steps' nanoseconds in the plan's and the pre-flight's lines.
    mask='s/[0-9]{10,}/T/g; s#/[^[:space:]]*/vramtrace-hook-[^/]*/(_vramtrace_[a-z_]+\.py)\t[0-9]+#HOOK/\1\tL#g'
    mask+="; s#$work#WORK#g"
    mask+='; s/^(Z|PF)\t(T)\t([0-9]+)\t[0-9]+\t/\1\t\2\t\3\tNS\t/'
    mask+='; s/^vramtrace\.torch\/2\t[0-9]+/vramtrace.torch\/2\tPID/'
    mask+='; s/\b(pid|[Pp]rocess) [0-9]+/\1 PID/g; s/\.[0-9]+\.(torch|vtrace|ask|done)\b/.PID.\1/g'
    mask+='; s/[0-9]+(\.[0-9]+)? (s|ms)\b/N \2/g'
    n=0
    while IFS= read -r f; do
      n=$((n + 1))
      sed -E "$mask" "$f" >"$dest/side-channel.$n"
    done < <(find "$work/run" -name 'vramtrace.*.torch' 2>/dev/null | sort)
    sed -E "$mask" "$work/out.txt" >"$dest/output"
  done
done
rm -rf "$work"
echo "hook_identity: $(find "$out" -name 'side-channel.*' | wc -l) side channels in $out"
