#!/usr/bin/env bash
# Writes what one build of vramtrace makes of a fixed set of runs, in a form two builds can be
# diffed by: report.json (keys sorted, generated_at removed) and `whatif --json` (keys sorted,
# and its exit code) of every run the stand-in end-to-end tests record and of every real trace
# under tests/data, and what `check` and `diff` say of each report against the next (gate/). A change meant to keep behaviour (a refactoring) shows an empty diff:
#
#   scripts/ci/identity.sh BUILD_A OUT_A CORPUS
#   scripts/ci/identity.sh BUILD_B OUT_B CORPUS
#   diff -r OUT_A OUT_B
#
# CORPUS holds the recorded runs, so that both builds read the same traces (a run recorded twice
# differs in its times): when it does not exist yet, BUILD's end-to-end tests (bin/vt_e2e_tests,
# built with the tests) are run once with their temporary folders kept, into CORPUS.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR CORPUS_DIR" >&2
  exit 2
fi
build=$(realpath "$1")
out=$2
corpus=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
vramtrace=$build/bin/vramtrace

if [[ ! -e $corpus/.recorded ]]; then
  mkdir -p "$corpus/tmp"
  # Failures of single test cases do not matter here: the runs they recorded are kept as they are.
  (cd "$build" && TMPDIR=$(realpath "$corpus/tmp") VT_KEEP_TEMP=1 VRAMTRACE_NO_FUZZ=1 \
     ./bin/vt_e2e_tests -w NoTests >"$corpus/e2e.log" 2>&1) || true
  touch "$corpus/.recorded"
fi
corpus=$(realpath "$corpus")

mkdir -p "$out"
out=$(realpath "$out")

# The runs: every folder of the corpus that holds traces, and every real run of tests/data.
mapfile -t runs < <(
  {
    find "$corpus" -name '*.vtrace' -printf '%h\n'
    find "$src/tests/data" -name '*.vtrace' -printf '%h\n'
  } | sort -u)

for dir in "${runs[@]}"; do
  case $dir in
    "$corpus"/*) name=corpus/${dir#"$corpus"/} ;;
    *) name=data/${dir#"$src/tests/data/"} ;;
  esac
  dest=$out/$(echo "$name" | tr '/' '_')
  mkdir -p "$dest"
  # One fixed scratch folder, so that no path a report might name differs between builds.
  work=${TMPDIR:-/tmp}/vt-identity-work
  rm -rf "$work" && mkdir -p "$work"
  rc=0
  "$vramtrace" report --no-progress -o "$work/r" "$dir" >/dev/null 2>"$work/err" || rc=$?
  echo "$rc" >"$dest/report.rc"
  if [[ -f $work/r/report.json ]]; then
    jq -S 'del(.generated_at)' "$work/r/report.json" >"$dest/report.json"
  fi
  rc=0
  "$vramtrace" whatif "$dir" --json >"$work/whatif.json" 2>/dev/null || rc=$?
  echo "$rc" >"$dest/whatif.rc"
  if [[ -s $work/whatif.json ]]; then
    jq -S . "$work/whatif.json" >"$dest/whatif.json" 2>/dev/null || cp "$work/whatif.json" "$dest/whatif.json"
  fi
  rm -rf "$work"
done

# The gate's and the diff's view of the same reports: each run's report against the next one's
# (a chain, so that every report is read both as a baseline and as a candidate), through `check`
# with a budget on a PyTorch category too and `diff`, each with its exit code. From one fixed
# scratch folder, so that the paths they name are the same for both builds.
reports=()
for dest in "$out"/*/; do
  [[ -f $dest/report.json ]] && reports+=("$dest")
done
mkdir -p "$out/gate"
for ((i = 0; i + 1 < ${#reports[@]}; i++)); do
  work=${TMPDIR:-/tmp}/vt-identity-work
  rm -rf "$work" && mkdir -p "$work"
  cp "${reports[i]}/report.json" "$work/a.json"
  cp "${reports[i + 1]}/report.json" "$work/b.json"
  pair=$out/gate/$(basename "${reports[i]}")--$(basename "${reports[i + 1]}")
  rc=0
  (cd "$work" && "$vramtrace" check b.json --baseline a.json --max-increase activations:5%) \
    >"$pair.check" 2>&1 || rc=$?
  echo "rc=$rc" >>"$pair.check"
  rc=0
  (cd "$work" && "$vramtrace" diff a.json b.json) >"$pair.diff" 2>&1 || rc=$?
  echo "rc=$rc" >>"$pair.diff"
  rm -rf "$work"
done
echo "$(ls "$out" | grep -cv '^gate$') runs and $(ls "$out/gate" | wc -l) gate outputs written to $out"
