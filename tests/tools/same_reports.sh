#!/usr/bin/env bash
# Whether two builds of vramtrace write the same report.json from the same traces: the build
# before a change to what the report computes or renders and the build after it.
#   tests/tools/same_reports.sh OLD_VRAMTRACE NEW_VRAMTRACE INPUT...
# An INPUT folder is searched for folders that hold traces (*.vtrace): each is one report (a
# `vramtrace run -o` folder, an end-to-end test's temporary folder kept with VT_KEEP_TEMP=1); an
# INPUT file is one report of its own (a fuzz corpus's trace). Both builds run
# `vramtrace report --merge` on each; their report.json, without the generation time and with
# keys sorted (jq -S), must be identical. An input both refuse is counted apart; one refused by
# one build only is a difference.
# Prints one line per difference and a summary; exits 1 when anything differs.
set -euo pipefail
OLD=$1
NEW=$2
shift 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
same=0
refused=0
differ=0

inputs=()
for in in "$@"; do
  if [[ -d $in ]]; then
    while IFS= read -r d; do inputs+=("$d"); done \
      < <(find "$in" -name '*.vtrace' -printf '%h\n' | sort -u)
  else
    inputs+=("$in")
  fi
done

render() {  # BIN INPUT OUT
  rm -rf "$3"
  if "$1" report --merge --no-progress -o "$3" "$2" >/dev/null 2>&1 && [[ -f $3/report.json ]]; then
    jq -S 'del(.generated_at)' "$3/report.json" >"$3.json"
  else
    echo refused >"$3.json"
  fi
}

for in in "${inputs[@]}"; do
  render "$OLD" "$in" "$WORK/old"
  render "$NEW" "$in" "$WORK/new"
  if ! cmp -s "$WORK/old.json" "$WORK/new.json"; then
    echo "DIFFERS: $in"
    diff "$WORK/old.json" "$WORK/new.json" | head -20 || true
    differ=$((differ + 1))
  elif [[ $(cat "$WORK/old.json") == refused ]]; then
    refused=$((refused + 1))
  else
    same=$((same + 1))
    # What the identical reports held, so that a summary says what was compared.
    jq -r '(.oom // [] | .[] | .findings[]? | "finding " + .kind),
           (.growth // [] | .[] | "growth"), (.leaks // [] | .[] | "leak site"),
           (.live_at_death // [] | .[] | "live-at-death site"), (.retained // [] | .[] | "retained pool"),
           (.oom // [] | .[] | "oom")' "$WORK/new.json" >>"$WORK/held" 2>/dev/null || true
  fi
done
[[ -f $WORK/held ]] && sort "$WORK/held" | uniq -c
echo "reports identical: $same, refused by both: $refused, different: $differ"
[[ $differ -eq 0 ]]
