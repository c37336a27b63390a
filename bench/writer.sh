#!/usr/bin/env bash
# What the preloaded library writes per event, and what its writer thread costs, raw
# (VRAMTRACE_COMPRESS=off, the writer as it was before compression) against zstd (the default),
# in one invocation, runs interleaved. The workload is tests/programs/bench_mix.cu on the CPU
# stand-in: a training-like mix (per iteration 6 cudaMallocAsync, 20 launches, 6 cudaFreeAsync;
# weights and a workspace by cudaMalloc, with stacks), SPIN_NS of busy waiting after each launch
# for a GPU's launch spacing. Each figure is the median of REPEATS runs (default 3), per event:
# the writer thread's CPU time, the application (allocating) thread's, the whole process's.
#   bench/writer.sh [ITERATIONS]     (default 20000: 640,000 events a run)
# Last, the wall time of a tiny program, raw against zstd (median of 40 runs each).
# BASELINE_LIB=path/libvramtrace.so adds a "before" row: that library (an earlier build) with
# its own defaults, interleaved with the others.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
REPEATS=${REPEATS:-3}
N=${1:-20000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "date: $(date -u +%F), host: $(nproc) cores, $(uname -m), libzstd $(readlink -f "$(ldconfig -p | sed -n 's/.*libzstd.so.1 .*=> //p' | head -1)" | sed 's/.*libzstd.so.//')"
# spin_ns stacks
mixes=("0 auto" "5000 auto" "5000 all")
for mix in "${mixes[@]}"; do
  read -r spin stacks <<<"$mix"
  for r in $(seq "$REPEATS"); do
    for mode in ${BASELINE_LIB:+before} off auto; do
      t="$WORK/$mode.vtrace"
      rm -f "$t"
      lib="$BUILD/lib/libvramtrace.so"
      [[ $mode != before ]] || lib=$BASELINE_LIB
      line=$(cd "$WORK" && LD_LIBRARY_PATH="$BUILD/standin" LD_PRELOAD="$lib" \
        VRAMTRACE_OUTPUT="$t" VRAMTRACE_COMPRESS=$mode VRAMTRACE_STACKS=$stacks \
        "$BUILD/tests/programs/bench_mix" "$N" "$spin" | tail -1)
      "$BUILD/bin/vramtrace" report "$t" -o "$WORK/out" --force --no-progress >/dev/null 2>&1
      events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["processes"][0]["events"])' "$WORK/out/report.json")
      echo "$spin $stacks $mode $(stat -c %s "$t") $events $line" >>"$WORK/runs"
    done
  done
done
python3 - "$WORK/runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    spin, stacks, mode, size, events, w, p, m = line.split()
    w, p, m = (int(x.split("=")[1]) for x in (w, p, m))
    rows.setdefault((spin, stacks), {}).setdefault(mode, []).append((int(size), int(events), w, p, m))
med = lambda xs: statistics.median(xs)
print("%-8s %-6s %-6s %10s %9s %8s %13s %12s %14s" % ("spin ns", "stacks", "frames", "events",
      "trace MB", "B/event", "writer ns/ev", "app ns/ev", "process ns/ev"))
for (spin, stacks), modes in rows.items():
    base = None
    for mode in ("before", "off", "auto"):
        if mode not in modes:
            continue
        rs = modes[mode]
        ev = med([r[1] for r in rs])
        b = med([r[0] / r[1] for r in rs])
        w = med([r[2] / r[1] for r in rs])
        p = med([r[3] / r[1] for r in rs])
        m = med([r[4] / r[1] for r in rs])
        name = {"before": "before", "off": "raw", "auto": "zstd"}[mode]
        extra = ""
        if mode == "auto":
            extra = "   B/event x%.3f, writer %+.1f, app %+.1f, process %+.1f ns/event" % (
                b / base[0], w - base[1], m - base[3], p - base[2])
        wtext = "n/a" if w < 0 else "%.1f" % w  # an unnamed writer thread: not found
        print("%-8s %-6s %-6s %10d %9.2f %8.2f %13s %12.1f %14.1f%s" % (spin, stacks, name, ev,
              med([r[0] for r in rs]) / 1e6, b, wtext, m, p, extra))
        if mode == "off":
            base = (b, w, p, m)
PY
# Start-up and exit of a tiny CUDA program (tests/programs/basic, 12 events): what loading
# libzstd, making the context and compressing the last frame at exit add to a process's life.
python3 - "$BUILD" "$WORK" <<'PY'
import os, statistics, subprocess, sys, time
build, work = sys.argv[1:]
walls = {"off": [], "auto": []}
for _ in range(40):
    for mode in walls:
        env = dict(os.environ, LD_LIBRARY_PATH=build + "/standin",
                   LD_PRELOAD=build + "/lib/libvramtrace.so",
                   VRAMTRACE_OUTPUT=work + "/basic.vtrace", VRAMTRACE_COMPRESS=mode)
        if os.path.exists(work + "/basic.vtrace"):  # an existing trace is kept, not replaced
            os.unlink(work + "/basic.vtrace")
        t0 = time.perf_counter()
        subprocess.run([build + "/tests/programs/basic"], env=env, stdout=subprocess.DEVNULL,
                       check=True)
        walls[mode].append(time.perf_counter() - t0)
off, auto = (statistics.median(walls[m]) * 1e3 for m in ("off", "auto"))
print("tiny program, wall (median of 40): raw %.2f ms, zstd %.2f ms (%+.2f ms)" % (off, auto, auto - off))
PY
