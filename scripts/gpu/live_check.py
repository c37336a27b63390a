"""Checks of a real PyTorch training run watched live (scripts/gpu/live.sh runs them):
  snapshot   the report of a paused moment (vramtrace snapshot, WORK/ready.json from
             live_train.py) against PyTorch's own figures then: the caching allocator's blocks
             in use and segments at the moment (devices[0].allocator.now) against
             memory_stats()'s requested bytes (exactly), torch.cuda.memory_allocated() (at
             most) and torch.cuda.memory_reserved() (exactly);
  polls      the /report.json answers fetched while the job ran: each parses, is a report of a
             running job, and the last one before the end saw the device's peak grow.
   live_check.py snapshot SNAPSHOT_REPORT READY_JSON
   live_check.py polls POLL_DIR FINAL_REPORT
   live_check.py poll STDERR_FILE POLL_DIR PID   (fetches /report.json every 2 s while PID runs,
                                                  from the URL vramtrace printed on stderr)"""
import glob
import json
import os
import sys

failed = 0


def check(ok, what):
    global failed
    print("%s: %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failed += 1


def in_use_now(report):
    """PyTorch's caching allocator at the report's moment: its blocks in use, its segments."""
    now = report["devices"][0]["allocator"]["now"]
    return now["in_use_bytes"], now["reserved_bytes"]


def snapshot(path, ready):
    r = json.load(open(path))
    fig = json.load(open(ready))
    live = r.get("live") or {}
    check(live.get("running") is True, "the snapshot is of a running job (live.running true)")
    in_use, reserved = in_use_now(r)
    print("  snapshot: PyTorch in use %d B, reserved %d B; PyTorch said requested %s B, "
          "allocated %d B, reserved %d B" % (in_use, reserved, fig.get("requested"),
                                             fig["allocated"], fig["reserved"]))
    # PyTorch's trace gives each block's requested size: what memory_stats() counts as
    # requested_bytes. memory_allocated() counts whole blocks (rounded up to 512 bytes, and a
    # large block keeps a remainder of under 1 MiB it was not split from): at least as much.
    check(in_use == fig.get("requested"),
          "PyTorch's blocks in use at the snapshot == memory_stats()['requested_bytes.all.current']"
          " (%d vs %s)" % (in_use, fig.get("requested")))
    check(in_use <= fig["allocated"],
          "... and within torch.cuda.memory_allocated() (%d <= %d, %.2f %% below: rounding and "
          "unsplit remainders of blocks)" % (in_use, fig["allocated"],
                                            100.0 * (fig["allocated"] - in_use) / fig["allocated"]))
    check(reserved == fig["reserved"],
          "the allocator's segments at the snapshot == torch.cuda.memory_reserved() (%d vs %d)"
          % (reserved, fig["reserved"]))


def polls(folder, final):
    answers = sorted(glob.glob(os.path.join(folder, "poll-*.json")))
    check(len(answers) >= 3, "at least 3 answers of /report.json while the job ran (%d)" % len(answers))
    peaks = []
    for a in answers:
        try:
            r = json.load(open(a))
        except ValueError:
            check(False, "%s parses" % a)
            continue
        running = (r.get("live") or {}).get("running")
        devs = r.get("devices") or []
        peaks.append((running, devs[0]["peak"]["bytes"] if devs else 0))
    print("  polls (running, device peak): %s" % peaks)
    check(all(p[0] in (True, False) for p in peaks), "every answer says whether the job runs")
    running = [p for p in peaks if p[0]]
    check(len(running) >= 2, "answers while the job ran: %d" % len(running))
    f = json.load(open(final))
    fpeak = f["devices"][0]["peak"]["bytes"]
    check(bool(running) and max(p[1] for p in running) <= fpeak,
          "no answer while running saw a peak above the final report's (%d)" % fpeak)
    check(bool(running) and running[-1][1] > 0, "the last answer while running has the device's peak")


def poll(stderr_file, folder, pid):
    import re
    import time
    import urllib.request
    os.makedirs(folder, exist_ok=True)
    url = None
    n = 0
    while True:
        alive = os.path.exists("/proc/%d" % pid)
        if url is None:
            m = re.search(r"live report: (http://\S+)", open(stderr_file).read())
            if m:
                base = m.group(1)
                url = base.split("?")[0].rstrip("/") + "/report.json" + (
                    "?" + base.split("?")[1] if "?" in base else "")
        if url:
            try:
                t0 = time.monotonic()
                body = urllib.request.urlopen(url, timeout=30).read()
                with open(os.path.join(folder, "poll-%03d.json" % n), "wb") as f:
                    f.write(body)
                print("  poll %d: %d bytes in %.3f s" % (n, len(body), time.monotonic() - t0))
                n += 1
            except Exception as ex:
                if alive:
                    print("  poll: %s" % ex)
        if not alive:
            return
        time.sleep(2)


if sys.argv[1] == "snapshot":
    snapshot(sys.argv[2], sys.argv[3])
elif sys.argv[1] == "poll":
    poll(sys.argv[2], sys.argv[3], int(sys.argv[4]))
else:
    polls(sys.argv[2], sys.argv[3])
sys.exit(1 if failed else 0)
