"""PyTorch's blocks behind a stretch of a program's run, read from the allocator trace
(torch.cuda.memory._snapshot()'s device_traces) by the hook's rules: those in use at the moment
the blocks made since a time held the most ("peak"), or those made since then and still in use
("leak"), grouped by the program's line that made them (_vramtrace_frames) and their category.
The pytest plugin names a test's peak and leak by it; the hook's own trace windows and lines
(_vramtrace_windows, _vramtrace_write) read the same trace."""
try:
    from ._vramtrace_frames import is_program_file  # as vramtrace._hook's (the pytest plugin)
except ImportError:
    from _vramtrace_frames import is_program_file  # as the hook's, beside sitecustomize.py


def _replay(entries, upto):
    """The blocks live after entries[:upto] by address, and where the bytes in use peaked."""
    live, held, best, best_at = {}, 0, 0, -1
    for i, e in enumerate(entries[:upto]):
        if e.get("action") == "alloc":
            live[e.get("addr")] = e
            held += e.get("size", 0)
            if held > best:
                best, best_at = held, i
        elif e.get("action") == "free_completed" and e.get("addr") in live:
            held -= live.pop(e.get("addr")).get("size", 0)
    return live, best_at


def block_line(frames, exclude=()):
    """The program's line of a block: its innermost frame of the program's own code (not
    PyTorch's, an installed package's, the test runner's or vramtrace's; nor under a folder of
    `exclude`)."""
    for f in frames or ():
        name = f.get("filename", "")
        if name and is_program_file(name) and not name.startswith(tuple(exclude)):
            return "%s:%s in %s" % (name, f.get("line", 0), f.get("name", "?"))
    return "(line unknown: PyTorch recorded no frame of the program)"


def blocks_behind(torch, device, since_us, what, top, categories, exclude=()):
    """[(bytes, count, line, category)], largest first, at most `top` (0: all), of `device`'s
    blocks behind what happened since `since_us` (the trace's clock: the Unix epoch's us):
    `what` "peak" or "leak" (above). `categories`([(address, made_us, freed_us)]) gives each
    block's category or None (the hook's vramtrace_categories)."""
    try:
        traces = torch.cuda.memory._snapshot().get("device_traces") or []
    except Exception:
        return []
    entries = [e for e in (traces[device] if device < len(traces) else ())
               if e.get("time_us", 0) >= since_us]
    live, best_at = _replay(entries, len(entries))
    if what == "peak":
        live, _ = _replay(entries, best_at + 1)
    if not live:
        return []
    freed = {}  # a block's free after the moment, for what its phase kept and what it did not
    for e in entries[best_at + 1:] if what == "peak" else ():
        addr = e.get("addr")
        if e.get("action") == "free_completed" and addr in live and addr not in freed:
            freed[addr] = e.get("time_us", 0)
    blocks = list(live.items())
    named = categories([(addr, e.get("time_us", 0), freed.get(addr)) for addr, e in blocks])
    groups = {}
    for (addr, e), category in zip(blocks, named):
        g = groups.setdefault((block_line(e.get("frames"), exclude), category), [0, 0])
        g[0] += e.get("size", 0)
        g[1] += 1
    rows = sorted(((b, n, line, cat) for (line, cat), (b, n) in groups.items()),
                  key=lambda r: (-r[0], r[2]))
    return rows[:top] if top > 0 else rows
