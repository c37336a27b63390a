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
#    addresses, build ids, the build's own path), so those fields are masked (and every run is
#    given one run id, which the Process record carries); every other field
#    of every record, and the order of the records, must be the same (context, and a stream
#    other than the default one: stand-in heap pointers, move with the length of the build's
#    path). A program whose masked records differ
#    between two runs of one build (threads interleave: the order, and the stand-in addresses
#    handed out, vary) is compared as a sorted list of records without addresses, and said so;
#    one that does a different amount of work each run (fork_storm) is not compared. Besides
#    each program as it is: bench_mix with 200 iterations and the Python scripts py_alloc.py
#    and py_nogil.py (Python frames in the stacks).
# On a GPU (PROGRAMS=a folder of CUDA programs, e.g. scripts/gpu/test.sh's gpu-out/bin): step 2
# only, those programs on the real driver (no stand-in), the records read by NEW's digest; OLD
# then needs only lib/libvramtrace.so. There the driver's pool and VMM handles are masked too.
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

PROGRAMS=${PROGRAMS:-}
# ---- 1. reading: the fuzz corpora -------------------------------------------------------------
[[ -z $PROGRAMS ]] && for f in "$ROOT"/tests/fuzz/corpus/trace_reader/* "$ROOT"/tests/fuzz/corpus/report_json/*.vtrace; do
  digest "$OLD" trace "$f" "$WORK/old"
  digest "$NEW" trace "$f" "$WORK/new"
  compare "decode $f" "$WORK/old" "$WORK/new"
done
[[ -z $PROGRAMS ]] && for f in "$ROOT"/tests/fuzz/corpus/torch_trace/*; do
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
    -e 's/ build_id="[^"]*"/ build_id=*/' \
    -e 's/ stream=[1-9][0-9]*/ stream=*/' |
    if [[ -n $PROGRAMS ]]; then
      # The real driver's pool and VMM handles are pointers into the process's heap, whose
      # layout moves with the library's own allocations (by 16 bytes between two builds).
      sed -E 's/ (handle|pool)=[1-9][0-9]*/ \1=*/g'
    else
      cat
    fi
}
# Runs a command under a build's library; @B in its words stands for the build.
run_prog() {  # BUILD OUT COMMAND...
  local build=$1 out=$2
  shift 2
  local standin="$build/standin"
  [[ -n $PROGRAMS ]] && standin=${LD_LIBRARY_PATH:-}
  (cd "$WORK" && LD_LIBRARY_PATH="$standin" LD_PRELOAD="$build/lib/libvramtrace.so" \
    VRAMTRACE_OUTPUT="$out" VRAMTRACE_COMPRESS=off VRAMTRACE_RUN_ID=same-records \
    timeout 60 setarch "$(uname -m)" -R "${@//@B/$build}" >/dev/null 2>&1) 2>/dev/null ||
    true  # some programs crash on purpose
}
programs=0
compared=0
check_program() {  # LABEL COMMAND...
  local p=$1
  shift
  rm -f "$WORK"/*.vtrace
  run_prog "$OLD" "$WORK/old1.vtrace" "$@"
  run_prog "$OLD" "$WORK/old2.vtrace" "$@"
  run_prog "$NEW" "$WORK/new1.vtrace" "$@"
  run_prog "$NEW" "$WORK/new2.vtrace" "$@"
  [[ -s $WORK/old1.vtrace && -s $WORK/new1.vtrace ]] || { echo "no trace: $p"; return; }
  programs=$((programs + 1))
  # The traces the programs wrote, read by both builds: identical digests.
  [[ -z $PROGRAMS ]] && for t in old1 new1; do
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
      return
    fi
  fi
  compare "write $p" "$WORK/old1.masked" "$WORK/new1.masked"
  compared=$((compared + 1))
  echo "write $p: $(wc -l <"$WORK/new1.masked") records, compared $how"
}
if [[ -n $PROGRAMS ]]; then
  for exe in "$PROGRAMS"/*; do
    [[ -x $exe && -f $exe ]] && check_program "$(basename "$exe")" "$exe"
  done
  echo "test programs: $programs run under both builds, $compared of them compared"
  [[ $compared -gt 0 ]] || { echo "no program's records were compared"; fail=1; }
  [[ $fail == 0 ]] && echo "SAME" || echo "DIFFERENT"
  exit $fail
fi
for exe in "$NEW"/tests/programs/*; do
  p=$(basename "$exe")
  [[ -x $exe && ! $p == *.so && ! $p == bench_* ]] || continue
  check_program "$p" "@B/tests/programs/$p"
done
# Many launches, pools and repeated stacks (kernel names and stack nodes found again), and
# Python frames (PyCode and PyStackNode records), with and without the GIL.
check_program "bench_mix 200" "@B/tests/programs/bench_mix" 200
if command -v python3 >/dev/null; then
  check_program py_alloc.py python3 "$ROOT/tests/programs/py_alloc.py" "@B/standin/libcudart.so.13"
  check_program py_nogil.py python3 "$ROOT/tests/programs/py_nogil.py" \
    "@B/standin/libcudart.so.13" "@B/tests/programs/libnative_thread.so"
fi
echo "test programs: $programs run under both builds, $compared of them compared"
# A comparison of nothing proves nothing.
[[ $compared -gt 0 ]] || { echo "no program's records were compared"; fail=1; }
[[ $fail == 0 ]] && echo "SAME" || echo "DIFFERENT"
exit $fail
