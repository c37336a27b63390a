#!/usr/bin/env python3
"""Small hostile traces against `vramtrace report`: every reader has a bound on what one input
can make it hold and do (docs/RELIABILITY.md), and past it the report is marked incomplete with
the bound named, never an abort. The traces come from vt_hostile_trace (tests/tools/
hostile_trace.cpp); before the bounds each of them aborted the reader or took a minute:
  - 21 zstd frames of RangePush records never popped (130 KB): 4 GiB, then std::bad_alloc;
  - 200 zstd frames of Dropped records (1.2 MB): 6.7 billion records, 48 to 90 s;
  - 5,000,000 allocations never freed (3.7 MB): 2.5 GB.
Asserted, of each: exit 0, report.json's run not complete with the bound's own words among its
problems, the exact figures read up to the bound, and the reader's peak resident set (of the
child, from the kernel) under a bound that the unbounded reader went far past. Nothing here
depends on the machine's speed."""
import os
import resource
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
import vtrel  # noqa: E402
from vtrel import check

HOSTILE = os.path.join(vtrel.BUILD, "bin", "vt_hostile_trace")
# Records a 64 MiB frame of the tool holds: it adds records while the next one (at most 11
# bytes) still fits. A Dropped{1} record is 2 bytes.
DROPPED_PER_FRAME = (64 * 2**20 - 11) // 2 + 1
# The reader decodes at most 256 MiB and 256 bytes for each byte of the trace: the frame of
# records that would pass it is the 6th (the first is the process's), after 4 of 64 MiB.
FRAMES_READ = 4


def report(trace, out):
    """Runs `vramtrace report`; returns (exit status, report.json or None, peak RSS in KiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    r = subprocess.run([vtrel.VRAMTRACE, "report", trace, "-o", out], capture_output=True,
                       env=vtrel.env(), timeout=240)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest of any child so far: each case runs a larger reader
    # than the one before, or says so.
    check(peak >= before, "children's peak RSS never falls")
    if r.returncode != 0:
        print(r.stderr.decode(errors="replace")[-2000:])
    path = os.path.join(out, "report.json")
    return r.returncode, (vtrel.load(path) if os.path.exists(path) else None), peak


def make(kind, n, tmp):
    path = os.path.join(tmp, "%s-%d.vtrace" % (kind, n))
    subprocess.run([HOSTILE, kind, path, str(n)], check=True, timeout=120)
    return path


def problems_of(j):
    return j["run"]["problems"] if j else []


def main():
    tmp = vtrel.temp_dir("vt-hostile-")

    # Ranges never popped: the stack is capped and the trace's decoding budget ends the read.
    trace = make("ranges", 21, tmp)
    rc, j, peak = report(trace, os.path.join(tmp, "ranges"))
    probs = problems_of(j)
    check(rc == 0, "ranges: exit 0 (was 134, std::bad_alloc), got %d" % rc)
    check(any("NVTX ranges nested more than 1024 deep on thread 1: the deeper ones are counted, "
              "not kept" in p for p in probs), "ranges: the depth bound named: %s" % probs)
    check(any("frame 6 at byte " in p and "the rest is not read" in p for p in probs),
          "ranges: the decoding budget named: %s" % probs)
    check(j is not None and j["run"]["complete"] is False, "ranges: the run is not complete")
    check(peak < 400 * 1024, "ranges: peak RSS %d KiB under 400 MiB (was 4 GiB and more)" % peak)

    # Dropped-records markers: read up to the budget, their count exact.
    trace = make("dropped", 200, tmp)
    rc, j, peak = report(trace, os.path.join(tmp, "dropped"))
    probs = problems_of(j)
    check(rc == 0, "dropped: exit 0, got %d" % rc)
    dropped = j["processes"][0]["dropped_events"] if j else None
    check(dropped == FRAMES_READ * DROPPED_PER_FRAME,
          "dropped: %s dropped events, expected %d (4 frames; all 200 were 6,710,885,400)"
          % (dropped, FRAMES_READ * DROPPED_PER_FRAME))
    check(any("frame 6 at byte " in p and "the rest is not read" in p for p in probs),
          "dropped: the decoding budget named: %s" % probs)
    check(peak < 400 * 1024, "dropped: peak RSS %d KiB under 400 MiB" % peak)

    # Allocations never freed: the process is read up to the bound on live allocations.
    trace = make("live", 5_000_000, tmp)
    rc, j, peak = report(trace, os.path.join(tmp, "live"))
    probs = problems_of(j)
    check(rc == 0, "live: exit 0, got %d" % rc)
    bound = ("more than 2097152 driver allocations live at once, the most one process may hold: "
             "its trace is read up to its event 2097155 (at 0 ns) and no further")
    check(any(bound in p for p in probs), "live: the bound named: %s" % probs)
    live = j["processes"][0]["devices"][0]["allocations"] if j else None
    check(live == 2_097_152, "live: %s allocations read, expected 2097152" % live)
    check(peak < 1400 * 1024, "live: peak RSS %d KiB under 1.4 GiB (was 2.5 GB)" % peak)
    vtrel.finish("hostile")


if __name__ == "__main__":
    main()
