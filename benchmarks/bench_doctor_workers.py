"""`doctor FOLDER` on one worker and on two (allocator_ref/memory_doctor/workers.py).

A folder of rank files is diagnosed with ``ALLOCATOR_REF_WORKERS=1`` (the ranks one after
another, in this process) and ``=2`` (a pool of two spawned processes), each the best of two
wall-clock timings; the two reports must be the same (else the figure is not recorded as a
speed-up).  The folder: every real snapshot under ../shared/traces (one file each, so different
jobs, each diagnosed on its own), else eight course-made ranks of one job
(``memory_doctor.examples.job_ranks``).  ``--quick``: four course-made ranks.

The speed-up is reported, never asserted: on this shared 2-core machine the load average (recorded
before and after) says how much of the second core the pool could have.
"""
from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

from .common import trace_paths, write_result


def _folder(quick: bool, traces_dir) -> tuple[Path, str]:
    from allocator_ref.memory_doctor import examples
    folder = Path(tempfile.mkdtemp(prefix="bench-doctor-workers-"))
    real = [] if quick else trace_paths(traces_dir)
    if real:
        for p in real:
            shutil.copyfile(p, folder / p.name)
        return folder, f"{len(real)} real snapshots (../shared/traces), one file each"
    n = 4 if quick else 8
    for i, snap in enumerate(examples.job_ranks(n, outlier=n // 2)):
        (folder / f"rank{i}.pickle").write_bytes(pickle.dumps(snap))
    return folder, f"{n} course-made ranks of one job (examples.job_ranks)"


def _timed(folder: Path, workers: int, repeats: int) -> tuple[float, dict]:
    from allocator_ref.memory_doctor.ranks import doctor_ranks
    os.environ["ALLOCATOR_REF_WORKERS"] = str(workers)
    best, report = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = doctor_ranks([folder])
        best = min(best, time.perf_counter() - t0)
    j = report.to_json()
    j.pop("seconds")
    return best, j


def run(quick: bool = False, traces_dir=None, out_dir=None) -> dict:
    from allocator_ref.memory_doctor.workers import cores
    folder, what = _folder(quick, traces_dir)
    before = os.environ.get("ALLOCATOR_REF_WORKERS")
    load_before = round(os.getloadavg()[0], 2)
    try:
        one_s, one = _timed(folder, 1, 1 if quick else 2)
        two_s, two = _timed(folder, 2, 1 if quick else 2)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("ALLOCATOR_REF_WORKERS", None) if before is None else os.environ.update(
            ALLOCATOR_REF_WORKERS=before)
    out = {"quick": quick, "folder": what, "files": len(one["ranks"]) + len(one["not_ranks_of_this_job"]),
           "cores": cores(), "one_worker_s": one_s, "two_workers_s": two_s, "speed_up": one_s / two_s,
           "same_report": one == two, "load_average_before": load_before,
           "load_average_after": round(os.getloadavg()[0], 2)}
    print(f"[doctor_workers] {what}: 1 worker {one_s:.2f} s, 2 workers {two_s:.2f} s, speed-up "
          f"{out['speed_up']:.2f}x, same report: {out['same_report']} (load {load_before} -> "
          f"{out['load_average_after']} on {out['cores']} cores)", flush=True)
    write_result("doctor_workers", out, out_dir)
    return out
