"""The side channel's writer of vramtrace's start-up hook (sitecustomize.py): the file
vramtrace.<pid>.torch (common/side_channel.h declares every line) with PyTorch's allocator trace
and the context's lines (modules, sites, marks, named storages, limits, pools, the exception,
the predicted steps), at exit, at each OOM and when a report of the moment asks."""
import os


def dump(torch, context, out_dir, max_entries, clean, realtime_ns, monotonic_ns):
    """Writes vramtrace.<pid>.torch into out_dir: the header, the allocator's settings, its trace
    (F and E lines), and the context's lines; written whole into a .tmp file, then moved."""
    # The kept windows before the snapshot: a window closed by the program's thread while a
    # report of the moment is written is then missing from it, never written twice.
    windows = None if context is None else context.windows
    kept, next_frame, trace_on = ("", 1, True) if context is None else windows.kept_lines()
    snap = torch.cuda.memory._snapshot()
    path = os.path.join(out_dir, "vramtrace.%d.torch" % os.getpid())
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    count = 0
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
        f.write("vramtrace.torch/2\t%d\t%d\t%d\t%s\n"
                % (os.getpid(), realtime_ns, monotonic_ns, clean(torch.__version__)))
        # The allocator's settings, for `vramtrace whatif` to replay the run under them.
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
        if conf:
            f.write("C\t%s\n" % clean(conf))
        wrapped = False
        # The windows the trace was on in, before the ring's (--torch=sampled).
        f.write(kept)
        for device, trace in enumerate(snap.get("device_traces", [])):
            if len(trace) >= max_entries:
                f.write("W\t%d\t%d\n" % (device, len(trace)))
                wrapped = True
            if context is not None:
                trace = windows.since_open(trace)
            entry_lines(device, trace, {}, clean, f.write, next_frame)
            count += len(trace)
            if context is not None and (trace or kept):
                write_limit(f, torch, device)
        if kept:
            # PyTorch's peak now: one reached after the last gap, while the trace was on, is
            # higher than any the gaps' lines hold.
            for device in range(len(snap.get("device_traces", [])) or 1):
                f.write("Y\t%d\t%s\n" % (device, windows.peak_allocated(device)))
        if not trace_on:
            # Off since the last window: what the allocator holds now closes the gap.
            f.write("".join(windows.gap_lines("U\t%d\t%d\t%s\n", snap)))
            f.write(allocator_state(snap, gap=True))
        if wrapped:
            # The ring held only the latest entries: what the allocator holds now (its
            # segments and the blocks in use) tells the collector what was live before them,
            # and every named storage labelled now says what those blocks are (a label from
            # before the window may name a storage freed since).
            f.write(allocator_state(snap))
            if context is not None:
                context.storages.label_all_now()
        if context is not None:
            write_pools(f, snap.get("segments", []), context.marks.graph_pools)
            write_context(f, context.marks, context.storages, windows, context.prediction)
        f.write("END\t%d\n" % count)
    os.replace(tmp, path)


def entry_lines(device, trace, frames, clean, write=None, first_frame=1):
    """The F and E lines of `trace`, a device's entries of PyTorch's allocator trace (a
    _snapshot()'s device_traces[device]): each frame once, by an id from `first_frame` kept in
    `frames` ((file, line, function) -> id). Written in chunks with `write`, or returned as a
    list without it; each action's text is cleaned once (about 1 s per million entries at exit
    instead of 1.8: the ring holds up to max_entries)."""
    actions = {}
    out, lines = [], []
    for e in trace:
        ids = ""
        stack = e.get("frames")
        if stack:
            refs = []
            for fr in stack:
                key = (fr.get("filename", ""), fr.get("line", 0), fr.get("name", ""))
                i = frames.get(key)
                if i is None:
                    i = frames[key] = len(frames) + first_frame
                    out.append("F\t%d\t%s\t%d\t%s\n" % (
                        i, clean(key[0]), int(key[1] or 0), clean(key[2])))
                refs.append(str(i))
            ids = ",".join(refs)
        a = e.get("action", "")
        act = actions.get(a)
        if act is None:
            act = actions[a] = clean(a)
        free = e.get("device_free")
        out.append("E\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n" % (
            device, act, e.get("addr") or 0, e.get("size") or 0,
            e.get("stream") or 0, e.get("time_us") or 0, ids,
            "" if free is None else int(free)))
        if len(out) >= 4096:
            if write is None:
                lines.extend(out)
            else:
                write("".join(out))
            out.clear()
    if write is None:
        lines.extend(out)
        return lines
    write("".join(out))
    return None


def allocator_state(snap, gap=False):
    """The segments (G lines: device, address, bytes) and the blocks in use (A lines: device,
    address, bytes) of a memory snapshot, written at the dump of a wrapped ring; with `gap`, the
    same as H and B lines, at the end of a gap of the trace (--torch=sampled). A segment's
    blocks are listed in address order. A block in use is given the size asked for
    (requested_size), as the trace's entries give it: its own size can be larger by the rest of
    a segment too small to split off."""
    segment_line, block_line = (("H\t%d\t%d\t%d\n", "B\t%d\t%d\t%d\n") if gap
                                else ("G\t%d\t%d\t%d\n", "A\t%d\t%d\t%d\n"))
    out = []
    for seg in snap.get("segments", []):
        device, address = int(seg.get("device", 0) or 0), int(seg.get("address", 0) or 0)
        out.append(segment_line % (device, address, int(seg.get("total_size", 0) or 0)))
        for block in seg.get("blocks", []):
            size = int(block.get("size", 0) or 0)
            if block.get("state") in ("active_allocated", "active_pending_free"):
                asked = int(block.get("requested_size", 0) or 0)
                out.append(block_line % (device, int(block.get("address", address)),
                                         asked if 0 < asked <= size else size))
            address += size
    return "".join(out)


def write_limit(f, torch, device):
    """The Q line: PyTorch's per-process fraction of `device`, and the device's memory."""
    try:
        cuda = torch.cuda
        fraction = cuda.get_per_process_memory_fraction(device)
        total = cuda.get_device_properties(device).total_memory
        f.write("Q\t%d\t%.17g\t%d\n" % (device, fraction, total))
    except Exception:
        pass


def write_pools(f, segments, graph_pools):
    """The P records: each segment of a private pool (segment_pool_id not (0, 0)) now; the
    collector counts a block in one as that pool's, a CUDA graph's where `graph_pools` (the
    pools graphs captured into) holds it. PyTorch before segment_pool_id: none."""
    out = []
    for seg in segments:
        try:
            pool = seg.get("segment_pool_id")
            if pool is None:
                continue
            pool = tuple(int(x) for x in pool)
            if len(pool) != 2 or pool == (0, 0):
                continue
            graph = pool in graph_pools or (pool[0] != 0 and pool[1] == 0)
            out.append("P\t%d\t%d\t%d\t%d\t%d\t%s\n" % (
                int(seg.get("device") or 0), int(seg.get("address") or 0),
                int(seg.get("total_size") or 0), pool[0], pool[1],
                "graph" if graph else "pool"))
        except Exception:
            continue
    f.write("".join(out))


def write_context(f, marks, storages, windows, prediction):
    """The context's lines: what the marks hold (M, S, D, K, X), the named storages (L), what
    the trace cost where the windows judged it (I), and the prediction's (N V R SA Z PF)."""
    f.write("".join(marks.module_lines))
    f.write("".join(marks.site_lines))
    clean = marks.clean
    for lines in (storages.labels, storages.grad_labels):
        f.write("".join("L\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n" % (
            t, dev, ptr, nbytes, kind, clean(name), "x".join(str(d) for d in shape),
            str(dtype).replace("torch.", "")) for t, dev, ptr, nbytes, kind, name, shape, dtype
            in lines))
    if marks.dropped:
        f.write("D\t%d\n" % marks.dropped)
    out = []
    for t, c in zip(marks.times, marks.codes):
        out.append("K\t%d\t%d\t%d\n" % (t, c & 15, c >> 4))
        if len(out) >= 8192:
            f.write("".join(out))
            out.clear()
    f.write("".join(out))
    if windows.cost:
        f.write("I\t%d\t%d\t%d\t%d\t%d\n" % windows.cost)
    if marks.exception:
        f.write(marks.exception)
    f.write("".join(prediction.predicted))
    if prediction.predicted and prediction.standin_ran:
        f.write("".join("SA\t%s\n" % n for n in prediction.step_assumptions))
    if prediction.plan_line:
        f.write(prediction.plan_line)
    if prediction.preflight_line:
        f.write(prediction.preflight_line)
