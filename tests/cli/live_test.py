"""A running job watched, end to end on the stand-in (tests/programs/live_steps, a job that the
test drives step by step through files, so that nothing here depends on the machine's speed):
  - `vramtrace snapshot RUN_DIR` and SIGUSR2 sent to the launcher write RUN_DIR/snapshot-N
    (report.json and report.html of that moment, private, never over another) while the job
    runs on; the final report is that of a run without snapshots; a snapshot of a PyTorch job
    asks the start-up hook for PyTorch's view of the moment (the tests' stand-in PyTorch);
  - `vramtrace run --serve`: the page, /report.json of the moment and the final report once the
    job has ended; read-only (405), another Host refused on loopback (403), a token on every
    address (403 without it); vramtrace ends with its command, with its exit status; the
    owner's requests (with the token) are answered while 106 other connections, from 101
    addresses, trickle a byte at a time and reconnect when closed;
  - `vramtrace snapshot` signals only a launcher of this vramtrace (another process named
    vramtrace-* that holds the folder open, as a forged run marker may name, is refused and
    lives on); planted entries (a link snapshot-999999999, a file, a zero-padded folder) change
    neither the next snapshot's number nor the folder the command prints;
  - bad input, each a clear message and exit 2 with nothing lost: a port in use (before the
    command starts), an address after a bare --serve, a folder that is not a running run, a
    snapshot of a run that has ended or whose launcher is gone.
Every wait is a poll with a generous bound; no sleep is an assertion. One bound is on time: a
request behind another client's idle connections is answered within the server's read timeout.
   live_test.py BUILD_DIR [CASE...]"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
sys.dont_write_bytecode = True
import vtrel  # noqa: E402  (the reliability tests' helpers)
from vtrel import check  # noqa: E402

VT = vtrel.VRAMTRACE
STEPS = os.path.join(vtrel.BUILD, "tests", "programs", "live_steps")
MiB = 1 << 20
# A 256 MiB stand-in device: the 1 GiB request after the steps fails.
ENV = vtrel.env(VRAMTRACE_STANDIN_DEVICE_BYTES=256 * MiB, VRAMTRACE_FLUSH_MS=20)


def wait_until(what, cond, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    check(False, "never happened within %d s: %s" % (timeout, what))
    return None


def touch(work, name):
    with open(os.path.join(work, name), "w"):
        pass


def step(work, name, done):
    touch(work, name)
    wait_until(done, lambda: os.path.exists(os.path.join(work, done)))


class Job:
    """`vramtrace run [OPTIONS] -o OUT -- live_steps WORK` in the background."""

    def __init__(self, root, name, options=(), env=None):
        self.work = os.path.join(root, name + "-work")
        self.out = os.path.join(root, name)
        os.mkdir(self.work)
        self.p = subprocess.Popen([VT, "run", *options, "-o", self.out, "--", STEPS, self.work],
                                  env=env or ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.err_lines = []
        wait_until("live_steps started", lambda: self.p.poll() is not None or
                   os.path.exists(os.path.join(self.work, "started")))

    def url(self):
        """The URL --serve printed (its line is the launcher's first)."""
        return printed_url(self.p, self.err_lines)

    def finish(self):
        for name, done in (("step-1", "done-1"), ("step-2", "done-2"), ("step-3", "done-3"),
                           ("oom", "oom-done")):
            if not os.path.exists(os.path.join(self.work, done)):
                step(self.work, name, done)
        touch(self.work, "end")
        out, err = self.p.communicate(timeout=120)
        return self.p.returncode, "".join(self.err_lines) + err


def printed_url(p, seen=None):
    """The URL `vramtrace run --serve` printed on stderr, the lines read until then kept in
    `seen`; None when it ended without one."""
    for line in p.stderr:
        if seen is not None:
            seen.append(line)
        m = re.match(r"vramtrace: live report: (http://\S+)$", line.strip())
        if m:
            return m.group(1)
    return None


def snapshot(run_dir, *extra):
    return subprocess.run([VT, "snapshot", run_dir, *extra], env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=180)


def figures(rep):
    """What a run's report says of its memory, without its times, pids and paths."""
    d = rep["devices"][0]
    return {"peak": d["peak"]["bytes"], "final": d["final_live_bytes"],
            "oom": [(o["requested_bytes"], o["live_bytes"]) for o in rep["oom"]],
            "growth": sorted((g["site"], g["bytes_per_iteration"]) for g in rep["growth"]),
            "leaks": sorted((l["site"], l["bytes"]) for l in rep["leaks"]),
            "complete": rep["run"]["complete"], "live": "live" in rep}


def snapshots_and_signal(root):
    job = Job(root, "snap")
    step(job.work, "step-1", "done-1")
    # The allocation reaches the launcher within the library's flush period: snapshots are
    # taken until one holds it, each in a folder of its own.
    taken = []

    def holds_16_mib():
        r = snapshot(job.out)
        check(r.returncode == 0, "snapshot: exit %d (%r)" % (r.returncode, r.stderr))
        if r.returncode != 0:
            return "failed"
        folder = r.stdout.strip()
        taken.append(folder)
        check(re.fullmatch(re.escape(job.out) + r"/snapshot-\d+", folder) is not None,
              "snapshot's stdout: %r" % r.stdout)
        check(r.stderr == "vramtrace: snapshot: %s/report.html (and report.json)\n" % folder,
              "snapshot's stderr: %r" % r.stderr)
        rep = vtrel.load(os.path.join(folder, "report.json"))
        now = rep["live"]["now"]
        return rep if now and now[0]["bytes"] == 16 * MiB else None

    rep = wait_until("a snapshot with the first step's 16 MiB", holds_16_mib)
    if not rep or rep == "failed":
        job.finish()
        return
    check(rep["live"]["running"] is True and rep["live"]["snapshot"] == len(taken),
          "snapshot's live object: %r" % {k: v for k, v in rep["live"].items() if k != "now"})
    check([f for f in taken] == [os.path.join(job.out, "snapshot-%d" % (i + 1))
                                 for i in range(len(taken))],
          "snapshots numbered 1, 2, ... each in its own folder: %r" % taken)
    site = rep["live"]["now"][0]["by_site"][0]
    check(site["site"].startswith("grow_step") and site["bytes"] == 16 * MiB,
          "what is live now, by site: %r" % site)
    proc = rep["processes"][0]
    check(proc.get("still_running") is True and proc["cut_short"] is False and rep["leaks"] == [],
          "a running process is running, not cut short, with no leak: %r" %
          {k: proc.get(k) for k in ("still_running", "cut_short")})
    folder = taken[-1]
    check(os.stat(folder).st_mode & 0o777 == 0o700, "snapshot folder mode %o" %
          (os.stat(folder).st_mode & 0o777))
    for name in ("report.json", "report.html"):
        path = os.path.join(folder, name)
        check(os.stat(path).st_mode & 0o777 == 0o600, "%s mode %o" % (name, os.stat(path).st_mode))
    html = open(os.path.join(folder, "report.html")).read()
    check("default-src 'none';" in html and '<meta name="vramtrace-live"' not in html and
          "connect-src" not in html,
          "a snapshot's page is an offline file (fetches nothing)")

    # SIGUSR2 by hand: the next snapshot; the job runs on (it is the launcher's signal only).
    marker = vtrel.load(os.path.join(job.out, "vramtrace.run"))
    check(marker["pid"] == job.p.pid and marker["launcher_start_ticks"] > 0 and
          marker.get("ended") is None, "the run marker names the launcher: %r" % marker)
    os.kill(job.p.pid, signal.SIGUSR2)
    nxt = os.path.join(job.out, "snapshot-%d" % (len(taken) + 1))
    wait_until("SIGUSR2's snapshot", lambda: os.path.exists(os.path.join(nxt, "report.html")))
    check(job.p.poll() is None, "the launcher ended on SIGUSR2")
    step(job.work, "step-2", "done-2")  # the job is alive: it takes its next step
    rc, err = job.finish()
    check(rc == 0, "the job with snapshots: exit %d (%r)" % (rc, err))
    check("vramtrace: snapshot: %s/report.html (and report.json)\n" % nxt in err,
          "the launcher says where SIGUSR2's snapshot is: %r" % err)
    final = vtrel.load(os.path.join(job.out, "report.json"))
    check(vtrel.load(os.path.join(job.out, "vramtrace.run")).get("ended") is True,
          "the run marker says the run has ended")

    # The same job without snapshots: the same final report.
    plain = Job(root, "plain")
    rc2, err2 = plain.finish()
    check(rc2 == 0, "the job without snapshots: exit %d (%r)" % (rc2, err2))
    a, b = figures(final), figures(vtrel.load(os.path.join(plain.out, "report.json")))
    check(a == b and a["live"] is False and a["peak"] == 48 * MiB and len(a["oom"]) == 1,
          "final report with snapshots %r, without %r" % (a, b))

    # The run has ended: a snapshot is refused, and nothing is written.
    r = snapshot(job.out)
    check(r.returncode == 2 and r.stdout == "" and r.stderr ==
          "vramtrace snapshot: the run in %s has ended: its report is %s/report.html\n"
          % (job.out, job.out), "snapshot of an ended run: %d %r" % (r.returncode, r.stderr))
    check(not os.path.exists(os.path.join(job.out, "snapshot-%d" % (len(taken) + 2))),
          "a snapshot of an ended run was written")
    print("snapshots (vramtrace snapshot, SIGUSR2, an ended run): checked")


def snapshot_torch(root):
    """A snapshot asks the PyTorch processes of the run (the start-up hook) for their allocator
    trace of the moment: it is written while the job runs (tests/programs/fake_torch here), and a
    snapshot has PyTorch's view of that moment."""
    work, out = os.path.join(root, "torch-work"), os.path.join(root, "torch")
    os.mkdir(work)
    script = os.path.join(work, "job.py")
    with open(script, "w") as f:
        f.write("import os, time, torch\n"
                "x = torch.empty(1024, 1024, device='cuda')\n"
                "open(os.path.join(%r, 'ready'), 'w').close()\n"
                "while not os.path.exists(os.path.join(%r, 'go')):\n"
                "    time.sleep(0.02)\n" % (work, work))
    env = dict(ENV, FAKE_TORCH_CUDART=os.path.join(vtrel.BUILD, "standin", "libcudart.so.13"),
               PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                       "programs", "fake_torch"),
               VRAMTRACE_TORCH_TRACE="full")  # not sampled by the iterations' time
    p = subprocess.Popen([VT, "run", "-o", out, "--", sys.executable, script], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until("the PyTorch job ready", lambda: p.poll() is not None or
               os.path.exists(os.path.join(work, "ready")))
    torch_trace = [os.path.join(out, n) for n in os.listdir(out) if n.endswith(".vtrace")]
    torch_trace = torch_trace[0][:-len(".vtrace")] + ".torch" if torch_trace else None
    check(torch_trace is not None and not os.path.exists(torch_trace),
          "before any snapshot, no allocator trace of the moment")
    r = snapshot(out)
    check(r.returncode == 0, "snapshot of a PyTorch job: %d %r" % (r.returncode, r.stderr))
    wait_until("the hook's answer", lambda: torch_trace and os.path.exists(torch_trace))
    r = snapshot(out)
    folder = r.stdout.strip()
    if r.returncode == 0:
        rep = vtrel.load(os.path.join(folder, "report.json"))
        merged = (rep["processes"][0].get("torch_allocator_trace") or {}).get("merged")
        check(merged is True, "the snapshot has PyTorch's view of the moment: %r"
              % rep["processes"][0].get("torch_allocator_trace"))
    touch(work, "go")
    p.communicate(timeout=120)
    check(p.returncode == 0, "the PyTorch job: exit %d" % p.returncode)
    print("snapshot of a PyTorch job (the hook's allocator trace of the moment): checked")


def snapshot_bad_input(root):
    f = os.path.join(root, "a-file")
    touch(root, "a-file")
    cases = [
        (os.path.join(root, "missing"), "%s: no such folder"),
        (f, "%s is not a folder: give the folder of a running `vramtrace run` (its -o, or "
            "vramtrace-out/run-N)"),
        (root + "/empty", "%s is not the folder of a `vramtrace run` (it has no vramtrace.run): "
                          "give the folder of a running run"),
    ]
    os.mkdir(root + "/empty")
    for path, message in cases:
        r = snapshot(path)
        check(r.returncode == 2 and r.stderr == "vramtrace snapshot: " + message % path + "\n",
              "snapshot %s: %d %r" % (path, r.returncode, r.stderr))
    # The launcher killed (SIGKILL: it could not mark the run ended): its pid is not signalled.
    job = Job(root, "gone")
    os.kill(job.p.pid, signal.SIGKILL)
    job.p.wait()
    r = snapshot(job.out)
    check(r.returncode == 2 and r.stderr.startswith(
        "vramtrace snapshot: the launcher of the run in %s (pid %d) is no longer running"
        % (job.out, job.p.pid)), "snapshot of a run whose launcher is gone: %d %r"
          % (r.returncode, r.stderr))
    with open(os.path.join(job.work, "started")) as pid_file:
        os.kill(int(pid_file.read()), signal.SIGKILL)  # the job left behind
    print("snapshot's bad input (no folder, a file, not a run, launcher gone): checked")


def request(url, method="GET", host=None, path=None, token=True):
    """A request to the server of URL; PATH, when given, carries the URL's token unless
    token=False."""
    m = re.match(r"http://([^/]+)/(.*)$", url)
    netloc, rest = m.group(1), m.group(2)
    port = int(netloc.rsplit(":", 1)[1])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Host": host} if host else {}
    t = re.search(r"[?&]token=([0-9a-f]+)", url)
    if path is not None and token and t and "token=" not in path:
        path += ("&" if "?" in path else "?") + "token=" + t.group(1)
    target = "/" + (rest if path is None else path)
    c.request(method, target, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


def serve(root):
    job = Job(root, "serve", ["--serve"])
    url = job.url()
    check(url is not None and re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{32}",
                                           url or "") is not None,
          "--serve alone: 127.0.0.1 on any free port, with a token: %r" % url)
    if not url:
        job.finish()
        return
    step(job.work, "step-1", "done-1")
    status, headers, body = request(url)
    check(status == 200 and b'<meta name="vramtrace-live" content="page.json">' in body and
          b"connect-src 'self'" in body, "GET /: %d" % status)

    def live_json(path):
        s, h, b = request(url, path=path)
        return json.loads(b) if s == 200 else None

    rep = wait_until("/report.json with the first step", lambda: (lambda r: r if r and r[
        "live"]["now"] and r["live"]["now"][0]["bytes"] == 16 * MiB else None)(
        live_json("report.json")))
    check(rep is not None and rep["live"]["running"] is True and rep["schema"] ==
          "vramtrace.report/1", "/report.json of the moment")
    page = live_json("page.json")
    check(page is not None and "live" in page and "frames" in page, "/page.json: the page's data")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        s, h, b = request(url, method=method, path="report.json")
        check(s == 405 and h.get("Allow") == "GET, HEAD", "%s: %d %r" % (method, s, h))
    s, h, b = request(url, host="attacker.example:80")
    check(s == 403, "another Host header on loopback, with the token: %d" % s)
    # Another user of the machine reaches loopback too: no token, no report.
    s, h, b = request(url, path="report.json", token=False)
    check(s == 403 and b == b"vramtrace: forbidden: this server answers only its URL, token "
          b"included\n", "no token on loopback: %d %r" % (s, b[:80]))
    s, h, b = request(url, path="report.json?token=" + "0" * 32)
    check(s == 403, "a wrong token on loopback: %d" % s)
    # Idle connections from one client (127.0.0.2, loopback too) hold a few of the server's
    # threads at most: a request from another client is answered at once, not after their
    # read timeouts.
    port = int(re.match(r"http://[^/]+:(\d+)/", url).group(1))
    idle = []
    for _ in range(40):
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.bind(("127.0.0.2", 0))
        sk.connect(("127.0.0.1", port))
        idle.append(sk)
    asked = time.monotonic()
    s, h, b = request(url, path="nothing-here")
    took = time.monotonic() - asked
    # The one bound on time here: within the server's read timeout (2 s), before which no idle
    # connection frees its thread; without the cap the answer waits for their timeouts.
    check(s == 404 and took < 2.0, "behind 40 idle connections of another client: %d after "
          "%.1f s" % (s, took))
    for sk in idle:
        sk.close()
    s, h, b = request(url, path="etc/passwd")
    check(s == 404, "an unknown path: %d" % s)
    s, h, b = request(url, method="HEAD", path="report.json")
    check(s == 200 and b == b"", "HEAD: %d" % s)
    step(job.work, "step-2", "done-2")
    step(job.work, "step-3", "done-3")
    step(job.work, "oom", "oom-done")
    rep = wait_until("the OOM in /report.json", lambda: (lambda r: r if r and r["oom"] else None)(
        live_json("report.json")))
    check(rep is not None and rep["oom"][0]["requested_bytes"] == 1024 * MiB,
          "the OOM as it happened")
    started = time.monotonic()
    rc, err = job.finish()
    check(rc == 0, "--serve: exit %d (%r)" % (rc, err))
    check(time.monotonic() - started < 60, "vramtrace lingered after its command")
    final = vtrel.load(os.path.join(job.out, "report.json"))
    check("live" not in final and final["devices"][0]["peak"]["bytes"] == 48 * MiB,
          "the final report.json of a served run has no live object")
    print("--serve on loopback (page, report.json, page.json, 405, 403, 404, HEAD): checked")


def serve_processes(root):
    """Two processes of one command (a program's workers, ranks): each appears as it connects,
    and what they hold is live now on the device, by site (one line for both) and by process."""
    w1, w2, out = (os.path.join(root, n) for n in ("procs-w1", "procs-w2", "procs"))
    os.mkdir(w1)
    os.mkdir(w2)
    p = subprocess.Popen([VT, "run", "--serve", "-o", out, "--", "sh", "-c",
                          '"$0" "$1" & "$0" "$2"; wait', STEPS, w1, w2], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = printed_url(p)
    check(url is not None, "two processes: no URL")

    def report():
        s, h, b = request(url, path="report.json")
        return json.loads(b) if s == 200 else None

    both = wait_until("both processes connected", lambda: (lambda r: r if r and len(
        r["processes"]) == 2 else None)(report()))
    check(both is not None and all(q.get("still_running") for q in both["processes"]),
          "two processes, each running")
    step(w1, "step-1", "done-1")
    step(w2, "step-1", "done-1")
    rep = wait_until("32 MiB live now", lambda: (lambda r: r if r and r["live"]["now"] and r[
        "live"]["now"][0]["bytes"] == 32 * MiB else None)(report()))
    if rep:
        now = rep["live"]["now"][0]
        check([(g["site"][:9], g["bytes"], g["count"]) for g in now["by_site"]] ==
              [("grow_step", 32 * MiB, 2)], "live now by site, both processes': %r" %
              now["by_site"])
        check(sorted(q["pid"] for q in now["by_process"]) == sorted(
            q["pid"] for q in rep["processes"]) and all(
                q["bytes"] == 16 * MiB and q["count"] == 1 for q in now["by_process"]),
              "live now by process: %r" % now["by_process"])
    for w in (w1, w2):
        for name, done in (("step-2", "done-2"), ("step-3", "done-3"), ("oom", "oom-done")):
            step(w, name, done)
        touch(w, "end")
    p.communicate(timeout=120)
    check(p.returncode == 0, "two processes: exit %d" % p.returncode)
    print("--serve with two processes (each as it connects, live now by site and process): checked")


def serve_before_cuda(root):
    """A job before its first CUDA work (a shell that waits, then starts the CUDA program): the
    report of that moment says so, then the job's memory appears once it used CUDA."""
    work, out = os.path.join(root, "precuda-work"), os.path.join(root, "precuda")
    os.mkdir(work)
    p = subprocess.Popen([VT, "run", "--serve", "-o", out, "--", "sh", "-c",
                          'while [ ! -e "$1/go" ]; do sleep 0.05; done; exec "$0" "$1" 1',
                          STEPS, work], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    url = printed_url(p)
    check(url is not None, "before CUDA: no URL")
    if url:
        s, h, b = request(url, path="report.json")
        rep = json.loads(b) if s == 200 else {}
        check(rep.get("devices") == [] and rep.get("live") == {
            "running": True, "now": [], "cuda_used": False,
            "note": "the job has not used CUDA yet: no process of it has created a CUDA context "
                    "or allocated device memory so far"},
              "before CUDA: /report.json says the job has not used CUDA yet: %r" % rep.get("live"))
        touch(work, "go")
        step(work, "step-1", "done-1")
        rep = wait_until("the job's first step in /report.json", lambda: (lambda r: r if r and r[
            "live"]["now"] and r["live"]["now"][0]["bytes"] == 16 * MiB else None)(
            json.loads(request(url, path="report.json")[2])))
        check(rep is not None and rep["live"]["cuda_used"] is True and "note" not in rep["live"],
              "after its first CUDA work: cuda_used, no note: %r" %
              ({k: v for k, v in rep["live"].items() if k != "now"} if rep else None))
    touch(work, "go")
    for name, done in (("step-1", "done-1"), ("oom", "oom-done")):
        if not os.path.exists(os.path.join(work, done)):
            step(work, name, done)
    touch(work, "end")
    out_text, err = p.communicate(timeout=120)
    check(p.returncode == 0, "before CUDA: exit %d (%r)" % (p.returncode, err))
    print("--serve before the job's first CUDA work: checked")


def serve_token(root):
    job = Job(root, "token", ["--serve=0.0.0.0:0"])
    url = job.url()
    m = re.fullmatch(r"http://([^/]+):(\d+)/\?token=([0-9a-f]{32})", url or "")
    check(m is not None, "--serve on another address: a URL with a 128-bit token: %r" % url)
    if m:
        token = m.group(3)
        s, h, b = request(url, path="report.json", token=False)
        check(s == 403, "no token: %d" % s)
        s, h, b = request(url, path="report.json?token=" + "0" * 32)
        check(s == 403, "a wrong token: %d" % s)
        s, h, b = request(url, path="report.json?token=" + token)
        check(s == 200 and json.loads(b)["live"]["running"] is True, "the token: %d" % s)
        s, h, b = request(url, method="POST", path="report.json?token=" + token)
        check(s == 405, "POST with the token: %d" % s)
        s, h, b = request(url, path="?token=" + token, host="attacker.example")
        check(s == 200, "with a token, any Host: %d" % s)
    rc, err = job.finish()
    check(rc == 0, "--serve=0.0.0.0:0: exit %d (%r)" % (rc, err))
    print("--serve on 0.0.0.0 (a token every request must carry): checked")


def serve_bad_input(root):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    out = os.path.join(root, "busy")
    flag = os.path.join(root, "ran")
    r = subprocess.run([VT, "run", "--serve=127.0.0.1:%d" % port, "-o", out, "--", "touch", flag],
                       env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    check(r.returncode == 2 and r.stderr ==
          "vramtrace run: --serve: cannot listen on 127.0.0.1:%d: Address already in use (choose "
          "another port, or --serve alone for any free one)\n" % port,
          "a port in use: %d %r" % (r.returncode, r.stderr))
    check(not os.path.exists(flag) and not os.path.exists(out),
          "a port in use: the command ran, or its folder was left")
    busy.close()
    r = subprocess.run([VT, "run", "--serve", "8080", "-o", out, "--", "touch", flag], env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 2 and r.stderr == "vramtrace run: --serve takes its address after '=' "
          "(--serve=8080): '8080' would be run as the command\n",
          "--serve 8080: %d %r" % (r.returncode, r.stderr))
    for value, why in (("99999", "'99999' is not a port (0 to 65535; 0: any free one)"),
                       ("no.such.host.invalid:1", None)):
        r = subprocess.run([VT, "run", "--serve=" + value, "-o", out, "--", "touch", flag],
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        check(r.returncode == 2 and r.stderr.startswith("vramtrace run: --serve: ") and
              (why is None or r.stderr == "vramtrace run: --serve: %s\n" % why),
              "--serve=%s: %d %r" % (value, r.returncode, r.stderr))
    check(not os.path.exists(flag) and not os.path.exists(out), "a bad --serve ran the command")
    # The command's own exit status, as without --serve.
    r = subprocess.run([VT, "run", "--serve", "-o", os.path.join(root, "exit3"), "--", "sh", "-c",
                        "exit 3"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    check(r.returncode == 3, "--serve, a command that exits 3: %d %r" % (r.returncode, r.stderr))
    print("--serve's bad input (port in use, --serve PORT, bad values) and exit status: checked")

class Tricklers:
    """Connections that each send one byte of a request every 0.5 s (within any read timeout),
    never the end of its head nor the token, and connect again at once when the server closes
    them: what any local user can aim at the page's server."""

    def __init__(self, port, sources):
        import threading
        self.port, self.sources = port, sources
        self.socks = [None] * len(sources)
        self.connects = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def connect(self, i):
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.settimeout(1)
        try:
            sk.bind((self.sources[i], 0))
            sk.connect(("127.0.0.1", self.port))
            sk.setblocking(False)
            self.connects += 1
        except OSError:
            sk.close()
            sk = None
        self.socks[i] = sk

    def run(self):
        line = b"GET /report.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        sent = 0
        while not self.stop.is_set():
            for i in range(len(self.socks)):
                if self.stop.is_set():
                    break
                if self.socks[i] is None:
                    self.connect(i)
                    continue
                try:
                    self.socks[i].send(line[sent % len(line):][:1])
                except OSError:  # closed by the server: come back
                    self.socks[i].close()
                    self.connect(i)
            sent += 1
            self.stop.wait(0.5)

    def close(self):
        self.stop.set()
        self.thread.join()
        for sk in self.socks:
            if sk is not None:
                sk.close()


def serve_under_slow_clients(root):
    """Any local user reaches 127.0.0.1 (and 127.0.0.2-101: Linux routes all of 127/8 to lo).
    Connections that never finish a request nor show the token take none of the owner's places:
    every request with the token is answered while 100 of them from 127.0.0.2-101 and 6 from
    127.0.0.1 (the owner's own address) trickle on."""
    job = Job(root, "slow", ["--serve"])
    url = job.url()
    check(url is not None, "--serve under slow clients: no URL")
    if not url:
        job.finish()
        return
    port = int(re.match(r"http://[^/]+:(\d+)/", url).group(1))
    token = re.search(r"token=([0-9a-f]+)", url).group(1)
    sources = ["127.0.0.%d" % (2 + i) for i in range(100)] + ["127.0.0.1"] * 6
    slow = Tricklers(port, sources)
    wait_until("106 slow connections open", lambda: slow.connects >= len(sources), timeout=60)
    served, slowest = [], 0.0

    def ask(path):
        nonlocal slowest
        asked = time.monotonic()
        try:
            # 10 s: a report of this moment on the stand-in takes well under a second, and the
            # starved server never answers (it closes the owner's connection at once, or leaves
            # it queued behind the slow ones for as long as they trickle).
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/%s?token=%s" % (path, token))
            r = c.getresponse()
            r.read()
            c.close()
            served.append((path, r.status))
        except (OSError, http.client.HTTPException) as e:
            served.append((path, type(e).__name__))
        slowest = max(slowest, time.monotonic() - asked)

    for path in ("report.json", "page.json", "", "report.json", "page.json", "report.html"):
        ask(path)
    # Once the slow connections have been closed and have come back (all of them, once each),
    # the owner is served still.
    wait_until("the slow connections closed and made again",
               lambda: slow.connects >= 2 * len(sources), timeout=60)
    for path in ("report.json", "page.json", "", "report.json", "page.json"):
        ask(path)
    slow.close()
    check(served == [(p, 200) for p, _ in served],
          "the owner's 11 requests under 106 slow connections: %d answered 200: %r"
          % (sum(1 for _, s in served if s == 200), served))
    # Without the token, a whole request is still answered (403), not dropped.
    try:
        s = request(url, path="report.json", token=False)[0]
    except (OSError, http.client.HTTPException) as e:
        s = type(e).__name__
    check(s == 403, "a request without the token after the slow clients: %r" % s)
    rc, err = job.finish()
    check(rc == 0, "--serve under slow clients: exit %d (%r)" % (rc, err))
    print("--serve: the owner served under 106 trickling connections: %d of %d (the slowest "
          "in %.2f s; %d slow connections made)" % (sum(1 for _, s in served if s == 200),
                                                     len(served), slowest, slow.connects))


def snapshot_impostor(root):
    """A run marker that names another process of the user: one whose executable is named
    vramtrace-something and that holds the run folder open (a forged or stale marker may name
    any). It is not this vramtrace: never signalled (SIGUSR2 would end it), one clear line."""
    job = Job(root, "impostor-run")
    impostor = os.path.join(root, "vramtrace-impostor")
    shutil.copy("/bin/sh", impostor)
    q = subprocess.Popen([impostor, "-c", 'exec 3<"$0"; echo ready; read line', job.out],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(q.stdout.readline() == "ready\n", "the impostor started")
    marker_path = os.path.join(job.out, "vramtrace.run")
    marker = vtrel.load(marker_path)
    forged = dict(marker, pid=q.pid, launcher_start_ticks=start_ticks(q.pid))
    os.chmod(marker_path, 0o600)
    with open(marker_path, "w") as f:
        json.dump(forged, f)
    r = snapshot(job.out, "--timeout", "5")
    check(r.returncode == 2 and r.stdout == "" and r.stderr ==
          "vramtrace snapshot: pid %d, which %s/vramtrace.run names, runs %s, not this "
          "vramtrace (%s): not signalled\n" % (q.pid, job.out, impostor, os.path.realpath(VT)),
          "snapshot of a run whose marker names another program: %d %r"
          % (r.returncode, r.stderr))
    check(q.poll() is None, "the impostor was signalled: it ended with %r" % q.poll())
    q.stdin.close()
    q.wait(timeout=60)
    with open(marker_path, "w") as f:
        json.dump(marker, f)
    rc, err = job.finish()
    check(rc == 0, "the impostor's run: exit %d (%r)" % (rc, err))
    print("snapshot of a marker naming another vramtrace-* program: refused, not signalled")


def start_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def snapshot_numbering(root):
    """Entries the launcher did not make, planted in the run folder, change neither the number
    of the next snapshot nor the folder the command prints: a link snapshot-999999999 (which
    made the next snapshot-1000000000, a name the command never lists), a file snapshot-3, a
    folder snapshot-07 (not how the launcher writes 7)."""
    job = Job(root, "numbering")
    elsewhere = os.path.join(root, "elsewhere")
    os.mkdir(elsewhere)
    touch(elsewhere, "report.html")
    os.symlink(elsewhere, os.path.join(job.out, "snapshot-999999999"))
    os.symlink(elsewhere, os.path.join(job.out, "snapshot-2"))
    touch(job.out, "snapshot-3")
    os.mkdir(os.path.join(job.out, "snapshot-07"))
    touch(os.path.join(job.out, "snapshot-07"), "report.html")
    taken = []
    for _ in range(3):
        r = snapshot(job.out, "--timeout", "30")
        taken.append((r.returncode, r.stdout.strip()))
        if r.returncode != 0:
            break
    want = [(0, os.path.join(job.out, "snapshot-%d" % n)) for n in (1, 4, 5)]
    check(taken == want, "snapshots beside planted entries: %r, not %r" % (taken, want))
    for _, folder in taken:
        check(os.path.isfile(os.path.join(folder, "report.html")) and
              not os.path.islink(folder), "%s is a snapshot's folder" % folder)
    check(os.listdir(elsewhere) == ["report.html"] and
          os.readlink(os.path.join(job.out, "snapshot-999999999")) == elsewhere and
          os.path.getsize(os.path.join(job.out, "snapshot-3")) == 0 and
          os.listdir(os.path.join(job.out, "snapshot-07")) == ["report.html"],
          "the planted entries are as they were")
    check(not os.path.exists(os.path.join(job.out, "snapshot-1000000000")),
          "a snapshot named past the numbers the command lists")
    rc, err = job.finish()
    check(rc == 0, "the numbering run: exit %d (%r)" % (rc, err))
    print("snapshot numbering beside planted links, files and zero-padded folders: checked")


def main():
    root = vtrel.temp_dir("vt-live-")
    cases = (snapshots_and_signal, snapshot_torch, snapshot_bad_input, snapshot_impostor,
             snapshot_numbering, serve, serve_under_slow_clients, serve_processes,
             serve_before_cuda, serve_token, serve_bad_input)
    # live_test.py BUILD_DIR [CASE...]: only those cases (to look at one).
    wanted = sys.argv[2:]
    for case in cases:
        if not wanted or case.__name__ in wanted:
            case(root)
    vtrel.finish("cli live test")


main()
