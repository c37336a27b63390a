#!/usr/bin/env bash
# Writes what one build of vramtrace makes of a fixed set of runs, in a form two builds can be
# diffed by: report.json (keys sorted, generated_at removed) and `whatif --json` (keys sorted,
# and its exit code) of every run the stand-in end-to-end tests record and of every real trace
# under tests/data. A change meant to keep behaviour (a refactoring) shows an empty diff:
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
echo "$(ls "$out" | wc -l) runs written to $out"
