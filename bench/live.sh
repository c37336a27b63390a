#!/usr/bin/env bash
# The cost of watching a running job (vramtrace run --serve; cli/live_report.h):
#  1. The job's own time with and without --serve while a page watches it: a poller that does
#     what the page does (page.json every 2 s, one request at a time, as a client that waits for
#     the final report) and fetches /report.json every 2 s too. The job is the stand-in's
#     bench_mix ITERATIONS SPIN_NS (a training-like mix; SPIN_NS of busy waiting after each
#     launch stands for the GPU's time), timed by /usr/bin/time inside the command, so that
#     vramtrace's own report at the end is not counted. Runs alternate, REPEATS of each; the
#     medians and their ratio.
#  2. LiveReport::now() on synthetic traces of SIZES events (bench/synth_trace.cpp), timed by
#     vt_live_bench: the first moment (every trace read), and the next one after the last
#     NEW_PERCENT % of the trace arrived (the report of a moment of a long job), with where its
#     time goes.
#   bench/live.sh [SIZES...]   (default 1000000 10000000; ITERATIONS=20000 SPIN_NS=20000
#                               REPEATS=3 NEW_PERCENT=1; PARTS="1 2" picks the parts)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ITERATIONS=${ITERATIONS:-20000}
SPIN_NS=${SPIN_NS:-20000}
REPEATS=${REPEATS:-3}
NEW_PERCENT=${NEW_PERCENT:-1}
PARTS=${PARTS:-1 2}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000000 10000000)
export LD_LIBRARY_PATH=$BUILD/standin

if [[ " $PARTS " == *" 1 "* ]]; then
echo "1. the job's time (bench_mix $ITERATIONS $SPIN_NS on the stand-in), without and with --serve and a page polling"
python3 - "$BUILD" "$WORK" "$ITERATIONS" "$SPIN_NS" "$REPEATS" <<'PY'
import os, re, statistics, subprocess, sys, threading, time, urllib.request
build, work, iterations, spin, repeats = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
vt = os.path.join(build, "bin", "vramtrace")
job = os.path.join(build, "tests", "programs", "bench_mix")

def run(serve, i):
    out = os.path.join(work, "%s-%d" % ("serve" if serve else "plain", i))
    timing = out + ".time"
    cmd = [vt, "run", *(["--serve"] if serve else []), "-o", out, "--", "/usr/bin/time", "-f", "%e",
           "-o", timing, job, iterations, spin]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    polls, latencies = [0], []
    if serve:
        url = None
        for line in p.stderr:
            m = re.match(r"vramtrace: live report: (\S+)", line)
            if m:
                url = m.group(1)
                break
        def poll():
            while p.poll() is None:
                for path in ("page.json?client=bench", "report.json"):
                    t0 = time.monotonic()
                    try:
                        with urllib.request.urlopen(url + path, timeout=60) as r:
                            r.read()
                        latencies.append(time.monotonic() - t0)
                        polls[0] += 1
                    except Exception:
                        pass
                time.sleep(2)
        threading.Thread(target=poll, daemon=True).start()
    p.communicate()
    with open(timing) as f:
        return float(f.read().split()[-1]), polls[0], latencies

plain, served, all_polls, all_lat = [], [], 0, []
for i in range(repeats):
    plain.append(run(False, i)[0])
    s, n, lat = run(True, i)
    served.append(s)
    all_polls += n
    all_lat += lat
mp, ms = statistics.median(plain), statistics.median(served)
print("   without --serve: %s s (median %.2f)" % (" ".join("%.2f" % x for x in plain), mp))
print("   with --serve:    %s s (median %.2f); %d requests answered, median %.3f s, max %.3f s"
      % (" ".join("%.2f" % x for x in served), ms, all_polls,
         statistics.median(all_lat) if all_lat else 0, max(all_lat) if all_lat else 0))
print("   ratio with/without: %.3f" % (ms / mp))
PY
fi

[[ " $PARTS " == *" 2 "* ]] || exit 0
echo "2. LiveReport::now() on synthetic traces (each still being written)"
for n in "${sizes[@]}"; do
  d="$WORK/synth-$n"
  mkdir -p "$d"
  "$BUILD/bin/vt_synth_trace" "$d/vramtrace.1.vtrace" "$n" zstd >/dev/null
  printf '   %-10s ' "$n"
  "$BUILD/bin/vt_live_bench" "$d" "$REPEATS" "$NEW_PERCENT"
  rm -rf "$d"
done
