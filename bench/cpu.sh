#!/usr/bin/env bash
# CPU benchmarks of the collector and the report on synthetic traces of 1, 10 and 100 million
# events (bench/synth_trace.cpp). For each size it prints the bytes per event on disk, the
# report's wall time, events per second, peak memory, the HTML size, and the ratio of the
# report's time to a plain read of the same file (cat > /dev/null) in the same invocation.
# Each size is written twice, raw and with zstd frames (CODECS="raw zstd"); "zstd vs raw" is
# the compressed trace's report time over the raw one's, same size, same invocation.
#   bench/cpu.sh [SIZES...]        (default: 1000000 10000000 100000000)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000000 10000000 100000000)
read -r -a codecs <<<"${CODECS:-raw zstd}"
printf '%-11s %-5s %10s %9s %12s %14s %10s %10s %12s %12s\n' events codec "trace MB" "B/event" "report s" "events/s" "max RSS MB" "HTML KB" "vs cat" "zstd vs raw"
for n in "${sizes[@]}"; do
for codec in "${codecs[@]}"; do
  t="$WORK/t.vtrace"
  "$BUILD/bin/vt_synth_trace" "$t" "$n" $([[ $codec == zstd ]] && echo zstd) >/dev/null
  bytes=$(stat -c %s "$t")
  s0=$(date +%s.%N); cat "$t" >/dev/null; s1=$(date +%s.%N)
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$BUILD/bin/vramtrace" report "$t" -o "$WORK/out" --force 2>/dev/null
  read -r secs rss_kb <"$WORK/time"
  html=$(stat -c %s "$WORK/out/report.html")
  [[ $codec != raw ]] || raw_secs=$secs
  python3 - "$n" "$codec" "$bytes" "$secs" "$rss_kb" "$html" "$s0" "$s1" "${raw_secs:-}" <<'PY'
import sys
n, codec, b, secs, rss, html, s0, s1, raw = sys.argv[1:]
n, b, secs, rss, html = int(n), int(b), float(secs), int(rss), int(html)
cat = max(float(s1) - float(s0), 1e-3)
vs_raw = f"{secs/max(float(raw),1e-3):11.2f}x" if codec != "raw" and raw else f"{'':12s}"
print(f"{n:<11d} {codec:5s} {b/1e6:10.1f} {b/n:9.2f} {secs:12.2f} {n/max(secs,1e-3):14.3g} {rss/1024:10.1f} {html/1024:10.1f} {secs/cat:11.1f}x {vs_raw}")
PY
  rm -f "$t"
done
unset raw_secs
done
