#!/usr/bin/env python3
# How `vramtrace report` and `vramtrace whatif --max-batch` scale with the side channel's size:
# the H200 trace of ResNet-50 that died in its first step (tests/data/h200/first-step/
# resnet50-b256), its predicted steps replaced by synthetic ones of N request lines ("R": a
# block made then freed, steps at batches 256 and 128), or its end given --torch=sampled gaps
# of N block lines ("gap": one gap whose allocator state lists N blocks). Prints the seconds and
# the peak memory at N and 2N and their ratios: linear is 2.0 for both, whatever the machine.
#
#   python3 bench/side_channel_scaling.py [build/bin/vramtrace] [N]   (N: 500000 by default)
import glob
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "tests/data/h200/first-step/resnet50-b256")


def copy_run(dst):
    shutil.copytree(RUN, dst)
    return glob.glob(dst + "/*.torch")[0]


def with_predicted(dst, n):
    t = copy_run(dst)
    lines = [l for l in open(t).read().split("\n")
             if l and l[0] not in "NRV" and not l.startswith("END")]
    t0 = "1796410968239933145"  # the step's start, as the hook wrote it
    for sid, batch in ((1, 256), (2, 128)):
        lines.append("N\t0\t%d\t%d\t256\t%s\tok" % (sid, batch, t0))
        for i in range(1, n // 4 + 1):
            lines.append("R\t%d\ta\t%d\t%d\t0\tf" % (sid, i, 16 * batch))
            lines.append("R\t%d\tf\t%d\t0\t0\tf" % (sid, i))
    open(t, "w").write("\n".join(lines + ["END\t555"]) + "\n")


def with_gap(dst, n):
    t = copy_run(dst)
    lines = [l for l in open(t).read().split("\n") if l and not l.startswith("END")]
    last = max(int(l.split("\t")[6]) for l in lines if l.startswith("E\t"))
    seg = 1 << 40
    lines += ["O\t0\t%d\t" % (last + 10), "U\t0\t%d\t" % (last + 20),
              "H\t0\t%d\t%d" % (seg, n * 4096)]
    lines += ["B\t0\t%d\t4096" % (seg + b * 4096) for b in range(n)]
    open(t, "w").write("\n".join(lines + ["END\t555"]) + "\n")


def measure(cmd):
    """Seconds and peak resident kilobytes of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    seconds = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before)


def main():
    vt = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bin/vramtrace")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 500000
    tmp = tempfile.mkdtemp(prefix="vt-scaling-")
    try:
        for shape, make in (("R", with_predicted), ("gap", with_gap)):
            rows = {}
            for size in (n, 2 * n):
                d = os.path.join(tmp, "%s-%d" % (shape, size))
                make(d, size)
                out = os.path.join(tmp, "out-%s-%d" % (shape, size))
                # ru_maxrss of children is the largest so far: each command in a process of
                # its own keeps the figures apart.
                rows[size] = [
                    subprocess.run(
                        [sys.executable, __file__, "--one", vt] + args,
                        capture_output=True, text=True).stdout.split()
                    for args in (["report", d, "-o", out], ["whatif", d, "--max-batch"])]
            for i, what in enumerate(("report", "whatif --max-batch")):
                (s1, m1), (s2, m2) = ([float(x) for x in rows[k][i]] for k in (n, 2 * n))
                print("%-5s %-18s %8d lines: %6.2f s %7.0f MiB   %8d lines: %6.2f s %7.0f MiB"
                      "   ratio: time %.2f, memory %.2f"
                      % (shape, what, n, s1, m1 / 1024, 2 * n, s2, m2 / 1024, s2 / s1, m2 / m1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        seconds, peak = measure(sys.argv[2:])
        print(seconds, peak)
    else:
        main()
