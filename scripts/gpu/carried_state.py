#!/usr/bin/env python3
"""A stateful model scored chunk by chunk on a GPU, its (h, c) carried from one chunk to the
next, in three ways, each under `vramtrace run`: what vramtrace's report says (the cause, the
growth per chunk, the remedies) next to what torch.cuda.memory_allocated() says after each chunk.

  carried   the state returned goes straight back in, autograd on: every chunk's graph stays
            alive through it (memory grows by one chunk's graph each chunk)
  detached  h, c = h.detach(), c.detach() between chunks: flat
  nograd    the same chunks under torch.no_grad(): flat

Checks: in `carried`, the report's cause is a kept graph through a carried state (the title
says the state is fed back), its growth per iteration is within 1 % of memory_allocated()'s
median growth per chunk, its first remedy detaches the state with `h, c = h.detach(),
c.detach()` and no remedy claims the growth goes on under no_grad; in `detached` and
`nograd`, memory_allocated() is flat after the second chunk and the report names no cause.

  scripts/gpu/carried_state.py --build build [--out gpu-out/carried] [--chunks 12]
  (as the traced program: carried_state.py --program MODE CHUNKS)"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def program(mode, chunks):
    import torch
    import torch.nn as nn

    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(1024, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 256)

        def forward(self, x, state):
            y, state = self.rnn(x, state)
            return self.head(y), state

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Scorer().to(dev)
    h = torch.zeros(2, 16, 1024, device=dev)
    c = torch.zeros(2, 16, 1024, device=dev)
    total = 0.0
    for chunk in range(chunks):
        x = torch.randn(16, 128, 1024, device=dev)
        if mode == "nograd":
            with torch.no_grad():
                scores, (h, c) = model(x, (h, c))
        else:
            scores, (h, c) = model(x, (h, c))
            if mode == "detached":
                h, c = h.detach(), c.detach()
        total += float(scores.mean().item())
        del scores
        torch.cuda.synchronize()
        print(json.dumps({"chunk": chunk, "allocated": torch.cuda.memory_allocated()}), flush=True)


def run(build, out, mode, chunks):
    vt = os.path.join(build, "bin", "vramtrace")
    run_dir = os.path.join(out, mode)
    p = subprocess.run([vt, "run", "--force", "-o", run_dir, "--", sys.executable,
                        os.path.abspath(__file__), "--program", mode, str(chunks)],
                       capture_output=True, text=True, timeout=600)
    allocated = [json.loads(l)["allocated"] for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or len(allocated) != chunks:
        print(f"FAIL {mode}: rc={p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        return None, allocated
    with open(os.path.join(run_dir, "report.json")) as f:
        return json.load(f), allocated


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--program":
        return program(sys.argv[2], int(sys.argv[3]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", default="gpu-out/carried")
    ap.add_argument("--chunks", type=int, default=12)
    a = ap.parse_args()
    failures = 0

    def check(ok, what):
        nonlocal failures
        print(("ok   " if ok else "FAIL ") + what)
        failures += 0 if ok else 1

    for mode in ("carried", "detached", "nograd"):
        report, allocated = run(a.build, a.out, mode, a.chunks)
        print(f"\n== {mode}: torch.cuda.memory_allocated() after each chunk (MiB):")
        print("   " + " ".join(f"{b / 2**20:.1f}" for b in allocated))
        if report is None:
            failures += 1
            continue
        growth = [y - x for x, y in zip(allocated[1:], allocated[2:])]
        per_chunk = statistics.median(growth) if growth else 0
        dg = report.get("diagnosis", {})
        cause = dg.get("cause") or {}
        print(f"   memory_allocated() per chunk (median from the 2nd on): {per_chunk:,} B")
        print(f"   vramtrace cause: {cause.get('kind')}: {cause.get('title')}")
        print(f"   vramtrace growth: {json.dumps(dg.get('growth'))}")
        for r in dg.get("remedies") or []:
            print(f"   remedy {r.get('kind')}: {r.get('title')} | how: {r.get('how')} | "
                  f"saves {r.get('saves_bytes')} | leaves_growth {r.get('leaves_growth', False)}")
        if mode == "carried":
            vt_per = (dg.get("growth") or {}).get("bytes_per_iteration", 0)
            check(cause.get("kind") == "kept_graph" and "fed back" in (cause.get("title") or ""),
                  "carried: the cause is a graph kept through the state fed back")
            check(per_chunk > 0 and abs(vt_per - per_chunk) <= per_chunk / 100,
                  f"carried: growth per chunk {vt_per:,} B within 1 % of PyTorch's {per_chunk:,} B")
            rs = dg.get("remedies") or []
            check(bool(rs) and rs[0].get("kind") == "detach_state"
                  and "h, c = h.detach(), c.detach()" in (rs[0].get("how") or ""),
                  "carried: the first remedy detaches h and c")
            check(not any(r.get("kind") == "no_grad" and r.get("leaves_growth") for r in rs),
                  "carried: no_grad is not said to leave the growth")
            check(not any(".logits" in (r.get("how") or "") for r in rs),
                  "carried: no example reads .logits")
        else:
            check(max(growth or [0]) <= 2 * 2**20, f"{mode}: memory_allocated() flat after the 2nd chunk")
            check(not cause or cause.get("kind") not in ("kept_graph", "kept_outputs"),
                  f"{mode}: no kept memory named as the cause")
    print(f"\n{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
