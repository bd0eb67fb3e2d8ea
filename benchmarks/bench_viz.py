"""How fast the pictures are: is stepping through a big trace still interactive?

    .venv/bin/python benchmarks/bench_viz.py            # full: 1,000 segments, 20,000 events
    .venv/bin/python benchmarks/bench_viz.py --quick    # smaller, for CI smoke runs

Measures (target: under 50 ms per frame on a 2-core machine):

1. ``render_blockmap`` of a 1,000-segment state (the real cs336 full-step
   snapshot from ../shared/traces when it is there: 1,010 segments; a
   synthetic one otherwise);
2. a 20,000-event trace recorded from the reference allocator with
   ``record_frames``, then stepped through: building frame i (state, caption,
   highlights) for every event, plus the SVG for every 20th.

Recording is not part of the per-frame target.  ``record_frames`` re-reads
only the blocks each event touched (``viz/segment_reader.py``), so recording
costs about what the replay itself costs (``record_s``; it was over a minute
when every event snapshotted all segments).  Stepping afterwards does not
depend on the trace length.

``run()`` returns the numbers as a dict for ``benchmarks/run.py``.
"""
from __future__ import annotations

import argparse
import pickle
import random
import statistics
import time
from pathlib import Path

MiB = 2**20
try:
    from benchmarks.common import TRACES      # ../shared/traces, or ALLOCATOR_REF_TRACES
except ImportError:                          # run as a script without PYTHONPATH
    TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


class _RefuseGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def thousand_segments() -> tuple[list, str]:
    path = TRACES / "cs336-gpt-ctx128-fullstep.pickle"
    if path.exists():
        with open(path, "rb") as f:
            return _RefuseGlobals(f).load()["segments"], f"real snapshot {path.name}"
    segments = []
    for i in range(1000):
        addr = 0x7F0000000000 + i * 0x10000000
        blocks = [{"address": addr, "size": 2 * MiB, "state": "active_allocated", "requested_size": 2 * MiB},
                  {"address": addr + 2 * MiB, "size": 18 * MiB, "state": "inactive", "requested_size": 0}]
        segments.append({"address": addr, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
                         "blocks": blocks})
    return segments, "synthetic state"


def time_ms(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def record_trace(n_events: int, seed: int = 0):
    """A random malloc/free workload on the simulated H100, recorded frame by frame."""
    import allocator_ref as ar
    from allocator_ref.viz.frames import record_frames

    rng = random.Random(seed)
    a = ar.CachingAllocator(ar.SimDevice("h100-80gb"), "")
    live = []
    with record_frames(a) as frames:
        while len(frames) < n_events:
            if live and (len(live) > 600 or rng.random() < 0.4):
                a.free(live.pop(rng.randrange(len(live))))
            else:
                size = rng.choice([rng.randrange(1, 1 * MiB), rng.randrange(1 * MiB, 64 * MiB)])
                live.append(a.malloc(size))
            if rng.random() < 0.002:
                a.empty_cache()
    return frames


def run(quick: bool = False) -> dict:
    from allocator_ref.viz.blockmap import render_blockmap

    segments, what = thousand_segments()
    render = time_ms(lambda: render_blockmap(segments), 5 if quick else 20)
    results = {"segments": len(segments), "state": what, "render_ms_median": statistics.median(render)}

    n_events = 2000 if quick else 20000
    start = time.perf_counter()
    frames = record_trace(n_events)
    results["record_s"] = time.perf_counter() - start
    results["events"] = len(frames)

    step_ms, draw_ms = [], []
    for i in range(len(frames)):
        t0 = time.perf_counter()
        frame = frames[i]                                   # state + caption + highlights
        t1 = time.perf_counter()
        step_ms.append((t1 - t0) * 1000)
        if i % 20 == 0:
            render_blockmap(frame.segments, highlight=frame.changed, segment_ids=frame.segment_ids)
            draw_ms.append((time.perf_counter() - t1) * 1000)
    back = time_ms(lambda: frames[len(frames) // 2 - 1], 20)   # a step back rebuilds from a keyframe
    results.update(step_ms_mean=statistics.mean(step_ms), step_ms_p95=sorted(step_ms)[int(0.95 * len(step_ms))],
                   draw_ms_mean=statistics.mean(draw_ms), step_back_ms_median=statistics.median(back),
                   max_segments_in_trace=max(len(frames[i].segments) for i in range(0, len(frames), 500)))
    results["frame_ms_mean"] = results["step_ms_mean"] + results["draw_ms_mean"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    results = run(parser.parse_args().quick)
    print(f"block map of {results['segments']} segments ({results['state']}): "
          f"{results['render_ms_median']:.1f} ms (median)")
    print(f"trace of {results['events']} events recorded in {results['record_s']:.1f} s "
          f"(up to {results['max_segments_in_trace']} segments)")
    print(f"  per step: frame {results['step_ms_mean']:.2f} ms (p95 {results['step_ms_p95']:.2f}), "
          f"SVG {results['draw_ms_mean']:.2f} ms, total {results['frame_ms_mean']:.2f} ms per frame; "
          f"step back {results['step_back_ms_median']:.2f} ms")
    verdict = "OK" if max(results["render_ms_median"], results["frame_ms_mean"]) < 50 else "SLOWER THAN 50 ms"
    print(f"target < 50 ms per frame: {verdict}")


if __name__ == "__main__":
    main()
