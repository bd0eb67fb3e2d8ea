"""The replay engine: pending frees cost linear time, and the doctor costs a few replays.

Two figures, each with its target (reported, never asserted):

* ``pending_frees`` -- generated traces with a backlog of ``record_stream`` frees
  (``gen_pending_frees.py``) at growing sizes: ``replay(..., verify=True)`` and ``doctor``
  (in process, the recording loaded before the clock starts), CPU seconds and microseconds
  per event.  Target: linear, i.e. the largest size costs at most 1.5x per event what the
  smallest does (quadratic would be 4x per doubling... 16x for 4x the frees; before the
  engine kept the frees in completion order, 16,000 frees took ``replay --verify`` 37 s).
* ``doctor_vs_replay`` -- ``python -m allocator_ref doctor`` and ``python -m allocator_ref
  replay --verify`` of the 19,342-event full training step, each timed as a whole process
  (start-up and loading included), run in turn ``runs`` times; the ratio of the medians
  (CPU seconds of the finished child, and wall seconds).  Target: at most 3x (4.0x when
  filed).  Skipped without ../shared/traces.
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO, trace_paths, write_result
from .gen_pending_frees import pending_frees_snapshot

FULLSTEP = "cs336-gpt-ctx128-fullstep"
SIZES = (2_000, 4_000, 8_000, 16_000)
QUICK_SIZES = (500, 1_000)
DOCTOR_SIZES = (1_000, 4_000)         # the doctor replays each trace a dozen times
QUICK_DOCTOR_SIZES = (300,)
TARGET_GROWTH = 1.5                   # per-event cost, largest size over smallest
TARGET_RATIO = 3.0


def _best(fn, repeats: int) -> float:
    """The fewest CPU seconds of ``repeats`` runs (on a shared machine, wall time also counts
    the waits for a CPU; the per-event target is about the work)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def pending_frees(quick: bool) -> dict:
    from allocator_ref.memory_doctor import doctor
    from allocator_ref.trace.recording import load_recording
    from allocator_ref.trace.replay import replay
    rows = []
    for frees in QUICK_SIZES if quick else SIZES:
        rec = load_recording(pending_frees_snapshot(frees))
        events = len(rec.device(0).events)
        result = replay(rec, verify=True, progress=False)
        seconds = _best(lambda: replay(rec, verify=True, progress=False), 1 if quick else 2)
        rows.append({"tool": "replay --verify", "frees": frees, "events": events, "seconds": seconds,
                     "us_per_event": seconds / events * 1e6, "verified": result.perfect})
        print(f"[engine] pending frees {frees:>6,}: replay --verify {events:>7,} events {seconds:7.3f} s "
              f"({rows[-1]['us_per_event']:.1f} us/event) verified={result.perfect}", flush=True)
    for frees in QUICK_DOCTOR_SIZES if quick else DOCTOR_SIZES:
        rec = load_recording(pending_frees_snapshot(frees))
        events = len(rec.device(0).events)
        seconds = _best(lambda: doctor(rec), 1)
        rows.append({"tool": "doctor", "frees": frees, "events": events, "seconds": seconds,
                     "us_per_event": seconds / events * 1e6})
        print(f"[engine] pending frees {frees:>6,}: doctor {events:>7,} events {seconds:7.3f} s "
              f"({rows[-1]['us_per_event']:.1f} us/event)", flush=True)
    growth = {}
    for tool in ("replay --verify", "doctor"):
        mine = [r for r in rows if r["tool"] == tool]
        if len(mine) > 1:
            growth[tool] = mine[-1]["us_per_event"] / mine[0]["us_per_event"]
    return {"rows": rows, "growth_per_event": growth}


def _child(argv: list) -> tuple[float, float]:
    """(cpu seconds, wall seconds) of one whole process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg"))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def doctor_vs_replay(path: Path, runs: int) -> dict:
    doctor_cmd = [sys.executable, "-m", "allocator_ref", "doctor", str(path)]
    replay_cmd = [sys.executable, "-m", "allocator_ref", "replay", str(path), "--verify"]
    _child(replay_cmd)                                   # warm the file cache and the imports
    d, r = [], []
    for _ in range(runs):                                # in turn, so a drifting machine hits both
        d.append(_child(doctor_cmd))
        r.append(_child(replay_cmd))
    med = lambda xs, k: statistics.median(x[k] for x in xs)       # noqa: E731
    out = {"runs": runs, "doctor_cpu_s": med(d, 0), "doctor_wall_s": med(d, 1),
           "replay_cpu_s": med(r, 0), "replay_wall_s": med(r, 1)}
    out["ratio_cpu"] = out["doctor_cpu_s"] / out["replay_cpu_s"]
    out["ratio_wall"] = out["doctor_wall_s"] / out["replay_wall_s"]
    print(f"[engine] doctor vs replay --verify on {path.stem}: cpu {out['doctor_cpu_s']:.2f} s / "
          f"{out['replay_cpu_s']:.2f} s = {out['ratio_cpu']:.2f}x, wall {out['ratio_wall']:.2f}x", flush=True)
    return out


def run(quick: bool = False, traces_dir=None, out_dir=None) -> dict:
    payload: dict = {"quick": quick, "pending_frees": pending_frees(quick)}
    path = next((p for p in trace_paths(traces_dir) if p.stem == FULLSTEP), None)
    ratio = doctor_vs_replay(path, 1 if quick else 5) if path is not None else None
    payload["doctor_vs_replay"] = ratio
    growth = payload["pending_frees"]["growth_per_event"]
    payload["targets"] = {
        "pending_frees_growth": {"target": f"<= {TARGET_GROWTH}x per event, largest size over smallest",
                                 "value": growth,
                                 "pass": None if quick or not growth else
                                 all(g <= TARGET_GROWTH for g in growth.values())},
        "doctor_vs_replay_cpu": {"target": f"<= {TARGET_RATIO}x", "value": ratio and ratio["ratio_cpu"],
                                 "pass": None if quick or ratio is None else ratio["ratio_cpu"] <= TARGET_RATIO},
    }
    write_result("engine", payload, out_dir)
    return payload


if __name__ == "__main__":
    run()
