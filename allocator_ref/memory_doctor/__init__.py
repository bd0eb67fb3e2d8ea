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
    from .diagnosis import device_snapshot, diagnose
    from .remedies import context_reserve, prescribe
    from .report import DoctorReport

    if device_memory is not None and not (isinstance(device_memory, (int, float)) and device_memory > 0):
        raise ValueError(f"device_memory is the GPU's size in GiB, a positive number; got {device_memory!r}")
    start = time.perf_counter()
    diag = diagnose(snapshot, device=device)
    plan = None
    if diag.verified and remedies:
        reserve = context_reserve(profile)
        if device_memory is not None:
            capacity = int(device_memory * GiB)
            target, where = capacity - reserve, (f"--device-memory {device_memory:g} GiB, less the CUDA context's "
                                                  f"{reserve / 2**20:,.0f} MiB")
            if target <= 0:
                raise ValueError(f"device_memory={device_memory:g} GiB is smaller than the CUDA context alone")
        elif diag.oom is not None:
            target = diag.oom.usable
            capacity = target + reserve
            where = "from the OOM: reserved at that moment plus what the driver reported free"
        else:
            target = capacity = None
            where = "no target"
        plan = prescribe(device_snapshot(diag.snapshot, diag.device), diag.device, diag.config, target, capacity,
                         where, profile, live_need=diag.live_need)
    report = DoctorReport(diag, plan, DoctorReport.decide(diag, plan))
    report.seconds = time.perf_counter() - start
    return report


__all__ = ["doctor"]
