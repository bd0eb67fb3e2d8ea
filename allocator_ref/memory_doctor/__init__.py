"""The memory doctor: why a recorded run ran out of memory (or wasted it), and what would fix it, proven.

    import allocator_ref as ar
    report = ar.doctor("run.pickle")                 # or ar.doctor(path, device_memory=24)
    print(report)                                    # the verdict and the findings, in plain words
    report.verdict.line                              # 'PYTORCH_CUDA_ALLOC_CONF=...' when a setting fixes it
    report.html("report.html")                       # one self-contained page with the pictures
    report.player()                                  # the whole trace in the block-map player

    python -m allocator_ref doctor run.pickle [--device-memory GiB] [--html report.html] [--json]

One idea per file:

* ``diagnosis`` -- replay at PyTorch's addresses and read the facts off it (peaks, where the
  unallocated memory sits, the largest live tensors, the OOM, streams);
* ``remedies``  -- replay the same requests under each change of settings;
* ``report``    -- the verdict those replays support, and the words;
* ``charts``, ``html_report`` -- the pictures and the self-contained page.
"""
from __future__ import annotations

import time
from typing import Any, Optional

GiB = 2**30


def doctor(snapshot: Any, device_memory: Optional[float] = None, *, device: Optional[int] = None,
           profile: str = "h100-80gb", remedies: bool = True):
    """Diagnose ``snapshot`` (a path or a dict): a :class:`~allocator_ref.memory_doctor.report.DoctorReport`.

    ``device_memory`` (GiB) is the GPU to fit in; without it, a snapshot that ran out of
    memory tells the target itself (what was reserved at the OOM plus what the driver said
    was free).  ``device`` picks a GPU of a multi-GPU snapshot (default: the one that ran
    out of memory, else the busiest).
    """
    from .capacity import infer_capacity
    from .diagnosis import diagnose, whatif_run
    from .remedies import context_reserve, prescribe
    from .report import DoctorReport

    if device_memory is not None and not (isinstance(device_memory, (int, float)) and device_memory > 0):
        raise ValueError(f"device_memory is the GPU's size in GiB, a positive number; got {device_memory!r}")
    start = time.perf_counter()
    diag = diagnose(snapshot, device=device)
    plan = capacity = None
    if diag.verified and remedies:
        run = whatif_run(diag, profile)
        capacity = infer_capacity(run.events, diag.reserved, run.program, diag.config,
                                  lambda usable: _replay_recorded(run, diag.config, usable))
        reserve = context_reserve(profile)
        recorded_usable = capacity.target if capacity.known else None
        if device_memory is not None:
            total = int(device_memory * GiB)
            target, where = total - reserve, (f"--device-memory {device_memory:g} GiB, less the CUDA context's "
                                              f"{reserve / 2**20:,.0f} MiB")
            if target <= 0:
                raise ValueError(f"device_memory={device_memory:g} GiB is smaller than the CUDA context alone "
                                 f"({reserve / 2**20:,.0f} MiB): give the GPU's whole size in GiB")
        elif capacity.known:
            target, total = capacity.target, capacity.target + reserve
            where = capacity_words(capacity)
        else:
            target = total = None
            where = capacity_words(capacity)
        plan = prescribe(run, diag.config, target, total, where, recorded_usable, live_need=diag.live_need)
    report = DoctorReport(diag, plan, DoctorReport.decide(diag, plan), capacity=capacity)
    report.seconds = time.perf_counter() - start
    return report


def _replay_recorded(run, config: str, usable):
    from ..trace.whatif import anchored_replay
    return anchored_replay(run.events, run.finals, run.program, config=config, usable=usable,
                           profile=run.profile, index=run.device)


def capacity_words(cap) -> str:
    """The capacity the run told, in one sentence."""
    from ..viz.sizes import format_bytes
    if cap.known:
        # Two decimals: the whole point is how narrow the range is (format_bytes keeps one).
        span = (f"{cap.low / GiB:.2f} GiB" if cap.low == cap.high else
                f"{cap.low / GiB:.2f}-{cap.high / GiB:.2f} GiB")
        text = (f"this run behaved like a GPU with {span} usable: the \"as recorded\" replay reproduces its "
                f"{cap.evidence[:-len(' in the trace')]} on any of those ({cap.replays} replays)")
        if cap.driver is not None and cap.target == cap.driver:
            text += f"; the target is {format_bytes(cap.driver)}, what cudaMemGetInfo said at the OOM (reserved + free)"
        elif cap.target is not None:
            text += f"; the target is the smallest, {format_bytes(cap.target)}"
        return text
    if cap.contradiction:
        return f"capacity unknown ({cap.contradiction}); the replays are uncapped"
    return f"capacity unknown: {cap.evidence}, so nothing tells the GPU's size; the replays are uncapped"


__all__ = ["doctor"]
