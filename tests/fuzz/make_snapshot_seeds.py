"""Writes the seed corpus of fuzz_torch_snapshot (tests/fuzz/corpus/torch_snapshot/): memory
snapshots shaped as PyTorch writes them (2.11's layout, 2.1's, expandable segments, a history that
begins late) with this Python's pickle, and hostile pickles the reader must refuse.

    python3 tests/fuzz/make_snapshot_seeds.py tests/fuzz/corpus/torch_snapshot"""
import os
import pickle
import sys

MiB = 1 << 20
A = 0x7F0000000000
T = 1_700_000_000_000_000


def frames(*names):
    return [{"filename": "train.py", "line": 10 + i, "name": n} for i, n in enumerate(names)]


def entry(action, addr, size, t, fr, new=True):
    e = {"action": action, "size": size, "stream": 0, "frames": fr}
    e["device_free" if action == "oom" else "addr"] = addr
    if new:
        e.update(time_us=T + t, compile_context="N/A", user_metadata="")
    return e


def snapshot(new=True, expandable=False, late=False, oom=True):
    fwd, bwd = frames("forward", "main"), frames("backward", "main")
    seg = "segment_map" if expandable else "segment_alloc"
    trace = [entry(seg, A, 20 * MiB, 0, fwd, new), entry("alloc", A, 8 * MiB, 1, fwd, new),
             entry("alloc", A + 8 * MiB, 8 * MiB, 2, bwd, new),
             entry("free_requested", A + 8 * MiB, 8 * MiB, 3, bwd, new),
             entry("free_completed", A + 8 * MiB, 8 * MiB, 4, bwd, new),
             entry("oom", 16 * MiB, 32 * MiB, 5, fwd, new)]
    if not oom:
        trace = trace[:-1]
    if late:
        trace = trace[2:]
    segs = [{"device": 0, "address": A, "total_size": 20 * MiB, "allocated_size": 8 * MiB,
             "active_size": 8 * MiB, "requested_size": 8 * MiB, "stream": 0,
             "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": expandable,
             "frames": fwd,
             "blocks": [{"address": A, "size": 8 * MiB, "requested_size": 8 * MiB,
                         "state": "active_allocated", "frames": fwd},
                        {"address": A + 8 * MiB, "size": 12 * MiB, "requested_size": 0,
                         "state": "inactive", "frames": []}]}]
    snap = {"segments": segs, "device_traces": [trace]}
    if new:
        snap["allocator_settings"] = {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else "",
            "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": expandable, "roundup_power2_divisions": {"1": 0}}
        snap["external_annotations"] = []
    return snap


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "torch-2.11-oom.pickle": pickle.dumps(snapshot(), protocol=4),
        "torch-2.11-expandable.pickle": pickle.dumps(snapshot(expandable=True), protocol=5),
        "torch-2.1-layout.pickle": pickle.dumps(snapshot(new=False), protocol=2),
        "history-begins-late.pickle": pickle.dumps(snapshot(late=True), protocol=4),
        "refused-global.pickle": b"\x80\x02cos\nsystem\n(S'true'\ntR.",
        "refused-reduce.pickle": pickle.dumps(snapshot(), protocol=4)[:-1] + b")R.",
        "truncated.pickle": pickle.dumps(snapshot(), protocol=4)[:300],
        "huge-string.pickle": b"\x80\x04\x8d" + b"\xff" * 8 + b".",
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
