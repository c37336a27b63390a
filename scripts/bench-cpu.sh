#!/usr/bin/env bash
# CPU benchmarks of the collector and the report on synthetic traces of 1, 10 and 100 million
# events (bench/synth_trace.cpp). For each size it prints the bytes per event on disk, the
# report's wall time, events per second, peak memory, the HTML size, and the ratio of the
# report's time to a plain read of the same file (cat > /dev/null) in the same invocation.
#   scripts/bench-cpu.sh [SIZES...]        (default: 1000000 10000000 100000000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000000 10000000 100000000)
printf '%-11s %10s %9s %12s %14s %10s %10s %12s\n' events "trace MB" "B/event" "report s" "events/s" "max RSS MB" "HTML KB" "vs cat"
for n in "${sizes[@]}"; do
  t="$WORK/t.vtrace"
  "$BUILD/bin/vt_synth_trace" "$t" "$n" >/dev/null
  bytes=$(stat -c %s "$t")
  s0=$(date +%s.%N); cat "$t" >/dev/null; s1=$(date +%s.%N)
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$BUILD/bin/vramtrace" report "$t" -o "$WORK/out" 2>/dev/null
  read -r secs rss_kb <"$WORK/time"
  html=$(stat -c %s "$WORK/out/report.html")
  python3 - "$n" "$bytes" "$secs" "$rss_kb" "$html" "$s0" "$s1" <<'PY'
import sys
n, b, secs, rss, html, s0, s1 = sys.argv[1:]
n, b, secs, rss, html = int(n), int(b), float(secs), int(rss), int(html)
cat = max(float(s1) - float(s0), 1e-3)
print(f"{n:<11d} {b/1e6:10.1f} {b/n:9.2f} {secs:12.2f} {n/max(secs,1e-3):14.3g} {rss/1024:10.1f} {html/1024:10.1f} {secs/cat:11.1f}x")
PY
  rm -f "$t"
done
