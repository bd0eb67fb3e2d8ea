"""A big snapshot made from a real one: its device's trace and segments copied as more ranks.

    python -m benchmarks.scale_snapshot ../shared/traces/cs336-gpt-ctx128-fullstep.pickle 40 out.pickle

Each copy is device k of the same file (its own records, as PyTorch writes them: nothing
shared through pickle's memo), so the file grows with the copies and every device replays
exactly as the original did.  This is how the loader's memory is measured on a file far
bigger than any trace we may store (bench_loader.py).
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path


def scaled(snapshot: dict, copies: int):
    """Yield (segments, trace) for each of ``copies`` devices, each a fresh copy of device 0."""
    data = pickle.dumps((snapshot["segments"], snapshot["device_traces"][0]), protocol=4)
    for k in range(copies):
        segments, trace = pickle.loads(data)
        for seg in segments:
            seg["device"] = k
        yield segments, trace


def write_scaled(source: Path, copies: int, target: Path) -> int:
    """Write the scaled file; returns its size in bytes."""
    from allocator_ref.trace.snapshot import load_snapshot
    snap = load_snapshot(source)
    segments, traces = [], []
    for segs, trace in scaled(snap, copies):
        segments += segs
        traces.append(trace)
    out = {k: v for k, v in snap.items() if k not in ("segments", "device_traces")}
    out.update(segments=segments, device_traces=traces)
    with open(target, "wb") as f:
        pickle.dump(out, f, protocol=4)
    return target.stat().st_size


if __name__ == "__main__":
    src, n, dst = sys.argv[1:4]
    size = write_scaled(Path(src), int(n), Path(dst))
    print(f"{dst}: {size / 2**20:.1f} MiB, {n} copies of {src}")
