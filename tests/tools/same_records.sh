#!/usr/bin/env bash
# Whether two builds read and write traces the same: the build before a change to the trace
# format code and the build after it (the bytes on disk and the reports must not change).
#   tests/tools/same_records.sh OLD_BUILD NEW_BUILD
# 1. Reading: every input of the fuzz corpora (tests/fuzz/corpus: traces, concatenated traces,
#    PyTorch allocator traces) and every trace of step 2, digested by each build's
#    vt_trace_digest (each decoded record with its fields, the reader's verdict, and report.json
#    of the model): the two digests must be identical, byte for byte.
# 2. Writing: each test program (tests/programs, on the CPU stand-in) run under each build's
#    library, without address randomisation. Two runs differ in what the clock, the kernel and the
#    build give them (times, pids, thread ids, frames per write, return addresses and load
#    addresses, build ids, the build's own path), so those fields are masked; every other field
#    of every record, and the order of the records, must be the same (context: a stand-in heap
#    pointer, moves with the length of the build's path). A program whose masked records differ
#    between two runs of one build (threads interleave: the order, and the stand-in addresses
#    handed out, vary) is compared as a sorted list of records without addresses, and said so;
#    one that does a different amount of work each run (fork_storm) is not compared.
# Prints one line per input and exits 1 when anything differs.
set -euo pipefail
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail=0
same=0

# A digest without the report's generation time.
digest() {  # BUILD trace|torch FILE OUT
  "$1/bin/vt_trace_digest" "$2" "$3" 2>&1 | grep -v '"generated_at":' >"$4" || true
}

compare() {  # LABEL A B
  if cmp -s "$2" "$3"; then
    same=$((same + 1))
  else
    echo "DIFFERENT: $1"
    diff "$2" "$3" | head -10 || true
    fail=1
  fi
}

# ---- 1. reading: the fuzz corpora -------------------------------------------------------------
for f in "$ROOT"/tests/fuzz/corpus/trace_reader/* "$ROOT"/tests/fuzz/corpus/report_json/*.vtrace; do
  digest "$OLD" trace "$f" "$WORK/old"
  digest "$NEW" trace "$f" "$WORK/new"
  compare "decode $f" "$WORK/old" "$WORK/new"
done
for f in "$ROOT"/tests/fuzz/corpus/torch_trace/*; do
  digest "$OLD" torch "$f" "$WORK/old"
  digest "$NEW" torch "$f" "$WORK/new"
  compare "decode $f" "$WORK/old" "$WORK/new"
done
echo "fuzz corpora: $same inputs decoded and reported identically"

# ---- 2. writing: the test programs --------------------------------------------------------------
# Masks what differs from run to run (see above); keeps the records only (not the report).
mask() {
  grep -E '^[A-Z][A-Za-z]+ t=' "$1" | sed -E \
    -e "s#$OLD|$NEW#BUILD#g" \
    -e 's/ (t|pid|ppid|realtime_ns|start_ns|thread|ip|load_bias|start|end|context)=[0-9]+/ \1=*/g' \
    -e 's/ build_id="[^"]*"/ build_id=*/'
}
run_prog() {  # BUILD PROGRAM OUT
  (cd "$WORK" && LD_LIBRARY_PATH="$1/standin" LD_PRELOAD="$1/lib/libvramtrace.so" \
    VRAMTRACE_OUTPUT="$3" VRAMTRACE_COMPRESS=off timeout 60 setarch "$(uname -m)" -R \
    "$1/tests/programs/$2" >/dev/null 2>&1) 2>/dev/null || true  # some programs crash on purpose
}
programs=0
for exe in "$NEW"/tests/programs/*; do
  p=$(basename "$exe")
  [[ -x $exe && ! $p == *.so && ! $p == bench_* ]] || continue
  rm -f "$WORK"/*.vtrace
  run_prog "$OLD" "$p" "$WORK/old1.vtrace"
  run_prog "$OLD" "$p" "$WORK/old2.vtrace"
  run_prog "$NEW" "$p" "$WORK/new1.vtrace"
  run_prog "$NEW" "$p" "$WORK/new2.vtrace"
  [[ -s $WORK/old1.vtrace && -s $WORK/new1.vtrace ]] || { echo "no trace: $p"; continue; }
  programs=$((programs + 1))
  # The traces the programs wrote, read by both builds: identical digests.
  for t in old1 new1; do
    digest "$OLD" trace "$WORK/$t.vtrace" "$WORK/$t.by-old"
    digest "$NEW" trace "$WORK/$t.vtrace" "$WORK/$t.by-new"
    compare "decode $p ($t's trace)" "$WORK/$t.by-old" "$WORK/$t.by-new"
  done
  for t in old1 old2 new1 new2; do
    digest "$NEW" trace "$WORK/$t.vtrace" "$WORK/$t.by-new"
    mask "$WORK/$t.by-new" >"$WORK/$t.masked"
  done
  how="in order"
  if ! cmp -s "$WORK/old1.masked" "$WORK/old2.masked" || ! cmp -s "$WORK/new1.masked" "$WORK/new2.masked"; then
    how="sorted, without addresses (its order varies between runs)"
    for t in old1 old2 new1 new2; do
      sed -E 's/ (address|handle)=[0-9]+/ \1=*/g' "$WORK/$t.masked" | sort -o "$WORK/$t.masked"
    done
    if ! cmp -s "$WORK/old1.masked" "$WORK/old2.masked"; then
      echo "write $p: what it does varies between two runs of one build, not compared"
      continue
    fi
  fi
  compare "write $p" "$WORK/old1.masked" "$WORK/new1.masked"
  echo "write $p: $(wc -l <"$WORK/new1.masked") records, compared $how"
done
echo "test programs: $programs run under both builds"
[[ $fail == 0 ]] && echo "SAME" || echo "DIFFERENT"
exit $fail
