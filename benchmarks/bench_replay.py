"""Replay throughput on the real PyTorch snapshots in ../shared/traces.

For every trace: events per second of ``replay(snapshot, verify=True)`` (the
caching allocator checked address for address against PyTorch's decisions) and
of ``verify=False``.  ``replay_fullstep_s`` is the verified replay of the
19,342-event ``cs336-gpt-ctx128-fullstep`` trace (target: under 1 s; the
snapshot is loaded before the clock starts, and its load time is reported apart).

``stream_heavy`` is a generated trace (``stream_heavy_snapshot``): 100,000 events
over 10,000 streams, replayed with ``verify=True`` (target: under 5 s; before the
replay was made linear in streams, a trace like it took 223 s).  ``--quick``
uses 10,000 events over 1,000 streams.  It needs no real trace.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from allocator_ref.trace.replay import replay
from allocator_ref.trace.snapshot import load_snapshot

from .common import trace_paths, write_result

FULLSTEP = "cs336-gpt-ctx128-fullstep"
TARGET_FULLSTEP_S = 1.0
STREAM_HEAVY = {"events": 100_000, "streams": 10_000}
TARGET_STREAM_HEAVY_S = 5.0


def stream_heavy_snapshot(events: int = 100_000, streams: int = 10_000) -> dict:
    """A generated trace with a stream for every few allocations, recorded by the reference allocator.

    Rounds over ``streams`` side streams: each allocates a small block on its own stream
    (its own 2 MiB segment: blocks never move between streams), every fifth block is
    also used on the next stream (``record_stream``), all are freed, then ``empty_cache()``
    gives every segment back (a cudaFree each, which waits for every stream).  Five events
    per stream and round, whole rounds until at least ``events``.
    """
    from allocator_ref.caching import CachingAllocator
    from allocator_ref.trace.replay_device import ManyStreamsDevice
    device = ManyStreamsDevice("h100-80gb")     # the same decisions as SimDevice, cudaFree in O(1)
    allocator = CachingAllocator(device, "")
    allocator.record_memory_history(context=None)
    side = [device.create_stream() for _ in range(streams)]
    recorded, rounds = 0, 0
    while recorded < events:
        for k, stream in enumerate(side):
            block = allocator.malloc(4096 * (1 + (k + rounds) % 7), stream)
            if (k + rounds) % 5 == 0:
                allocator.record_stream(block, side[(k + 1) % streams])
            allocator.free(block)
        allocator.empty_cache()
        rounds += 1
        recorded = len(allocator.trace.dicts())
    return allocator.snapshot()          # whole rounds: the final segments match the trace


def _stream_heavy(quick: bool, repeats: int) -> dict:
    """The generated stream-heavy trace: its size, and the verified and plain replay times (best of ``repeats``)."""
    size = {"events": 10_000, "streams": 1_000} if quick else STREAM_HEAVY
    t0 = time.perf_counter()
    snap = stream_heavy_snapshot(**size)
    record_s = time.perf_counter() - t0
    events = snap["device_traces"][0]
    v_s, v_res = _timed(lambda: replay(snap, verify=True, progress=False), repeats)
    n_s, _ = _timed(lambda: replay(snap, verify=False, progress=False), repeats)
    j = v_res.to_json()
    row = {"events": len(events), "streams": len({e["stream"] for e in events}), "record_s": record_s,
           "verify_s": v_s, "verify_events_per_s": len(events) / v_s, "plain_s": n_s,
           "allocs": j["allocs"], "allocs_exact": j["allocs_exact"], "perfect": v_res.perfect}
    print(f"[replay] stream-heavy (generated)  {row['events']:>6} events over {row['streams']:,} streams  "
          f"verify {v_s:6.3f} s  plain {n_s:6.3f} s  exact {j['allocs_exact']}/{j['allocs']}", flush=True)
    return row


def _timed(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(quick: bool = False, traces_dir: Optional[Path] = None, out_dir=None) -> dict:
    repeats = 1 if quick else 3
    rows = []
    fullstep_s = None
    for path in trace_paths(traces_dir):
        t0 = time.perf_counter()
        snap = load_snapshot(path)
        load_s = time.perf_counter() - t0
        events = sum(len(t) for t in snap.get("device_traces", []))
        v_s, v_res = _timed(lambda: replay(snap, verify=True, progress=False), repeats)
        n_s, _ = _timed(lambda: replay(snap, verify=False, progress=False), repeats)
        j = v_res.to_json()
        row = {
            "trace": path.stem, "events": events, "load_s": load_s,
            "verify_s": v_s, "verify_events_per_s": events / v_s if v_s else None,
            "plain_s": n_s, "plain_events_per_s": events / n_s if n_s else None,
            "allocs": j["allocs"], "allocs_exact": j["allocs_exact"], "perfect": v_res.perfect,
        }
        rows.append(row)
        if path.stem == FULLSTEP:
            fullstep_s = v_s
        print(f"[replay] {path.stem:<34} {events:>6} events  verify {v_s:6.3f} s "
              f"({row['verify_events_per_s']:>9,.0f} ev/s)  plain {n_s:6.3f} s  "
              f"exact {j['allocs_exact']}/{j['allocs']}", flush=True)
    heavy = _stream_heavy(quick, repeats)
    payload = {
        "quick": quick,
        "repeats": repeats,
        "stream_heavy": heavy,
        "traces": rows,
        "skipped": None if rows else "no traces found in ../shared/traces",
        "replay_fullstep_s": fullstep_s,
        "targets": {"replay_fullstep_s": {
            "target": f"< {TARGET_FULLSTEP_S} s", "value": fullstep_s,
            "pass": None if fullstep_s is None else fullstep_s < TARGET_FULLSTEP_S},
            "stream_heavy_verify_s": {
            "target": f"< {TARGET_STREAM_HEAVY_S} s for {STREAM_HEAVY['events']:,} events over "
                      f"{STREAM_HEAVY['streams']:,} streams", "value": heavy["verify_s"],
            "pass": None if quick else heavy["verify_s"] < TARGET_STREAM_HEAVY_S and heavy["perfect"]}},
    }
    write_result("replay", payload, out_dir)
    return payload


if __name__ == "__main__":
    run()
