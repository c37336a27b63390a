#!/usr/bin/env bash
# A ready CI job, plain shell: run a program under vramtrace and fail when its peak device
# memory grew past the baseline kept in the repository.
#
#   scripts/ci/memory-gate.sh BASELINE.json -- python train.py --steps 20
#
# Environment: VRAMTRACE (path of the vramtrace binary, default: on PATH or ./build/bin),
# MAX_INCREASE (default 5%), MAX_PEAK (optional, e.g. 40GiB), CATEGORY_BUDGETS (optional, budgets
# of PyTorch's categories at the peak, e.g. "parameters:0 activations:5%"), OUT (default vramtrace-ci).
# Exit: 0 within budget, 1 regression, 2 bad baseline or usage, 3 a process of the run was not
# profiled (no CUPTI, or held by another tool: its memory is unknown), 4 an incomplete
# measurement (a process cut short, a device of the baseline not measured), else the program's
# own failure. Another command than the baseline's is a note in the output, not a failure.
# Writes OUT/summary.md (append it to $GITHUB_STEP_SUMMARY) and OUT/junit.xml.
# To create or update the baseline: UPDATE_BASELINE=1 scripts/ci/memory-gate.sh BASELINE.json -- CMD
set -uo pipefail
if [[ $# -lt 3 || $2 != "--" ]]; then
  echo "usage: $0 BASELINE.json -- COMMAND..." >&2
  exit 2
fi
baseline=$1
shift 2
VRAMTRACE=${VRAMTRACE:-$(command -v vramtrace || echo ./build/bin/vramtrace)}
OUT=${OUT:-vramtrace-ci}
MAX_INCREASE=${MAX_INCREASE:-5%}

if [[ ${UPDATE_BASELINE:-0} == 1 || ! -f $baseline ]]; then
  [[ -f $baseline ]] || echo "memory-gate: no baseline at $baseline yet: recording one" >&2
  "$VRAMTRACE" run --force -o "$OUT" -- "$@" || exit $?
  # A run with no profiled process or one not profiled (exit 2), or cut short (exit 4), cannot be a
  # baseline: check refuses it.
  "$VRAMTRACE" check "$OUT" --baseline "$OUT" > /dev/null || exit $?
  mkdir -p "$(dirname "$baseline")"
  cp "$OUT/report.json" "$baseline"
  echo "memory-gate: baseline written to $baseline; commit it" >&2
  exit 0
fi

args=(--baseline "$baseline" --max-increase "$MAX_INCREASE"
      --markdown "$OUT/summary.md" --junit "$OUT/junit.xml")
[[ -n ${MAX_PEAK:-} ]] && args+=(--max-peak "$MAX_PEAK")
for budget in ${CATEGORY_BUDGETS:-}; do args+=(--max-increase "$budget"); done
mkdir -p "$OUT"
"$VRAMTRACE" run --force "${args[@]}" -o "$OUT" -- "$@"
rc=$?
if [[ -n ${GITHUB_STEP_SUMMARY:-} && -f $OUT/summary.md ]]; then
  cat "$OUT/summary.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit $rc
