"""Course-made runs the doctor is taught and tested on: each recorded by the reference allocator.

Every function runs a small workload on a :class:`~allocator_ref.CachingAllocator` with
history on (``record_memory_history``, as ``torch.cuda.memory._record_memory_history``) and
returns its snapshot, the same dict ``torch.cuda.memory._snapshot()`` gives:

* ``fragmentation_run`` -- fills a 1 GB GPU with 6 MiB tensors, frees two of every three,
  then asks for ``big_mib``: each 20 MiB segment keeps one live tensor, so the free bytes are
  there but in pieces (with the default 200 MiB, fragmentation);
* ``shortage_run`` -- the same with a request larger than every free byte (a shortage), and
  optionally more live memory after it (the rest of the run needs more than the failure);
* ``job_ranks`` -- one job's ranks: ``n`` alike (each a little different, as real ranks are)
  and one outlier, with either more live memory or the same live memory laid out worse;
* ``long_context_rank`` -- a rank of another job: the same program with 16 times the sequence
  (every tensor 16 times larger), on a 16 GB GPU: not a rank of ``job_ranks``' job;
* ``big_expandable_run`` -- ``expandable_segments:True`` on a simulated GPU larger than every
  profile, holding ``held_gib``: what a B200's snapshot looks like to the doctor.
"""
from __future__ import annotations

import dataclasses

from ..caching.allocator import CachingAllocator
from ..caching.oom import OutOfMemoryError
from ..device.sim import SimDevice

MiB = 2**20
GiB = 2**30


def _recording(profile: str = "tiny-1gb", config: str = "", total: int = 0) -> CachingAllocator:
    device = SimDevice(profile)
    if total:
        device.info = dataclasses.replace(device.info, total_memory=total)
    allocator = CachingAllocator(device, config)
    allocator.record_memory_history(max_entries=1_000_000)
    return allocator


def fragmentation_run(big_mib: int = 200) -> dict:
    """120 tensors of 6 MiB, two of every three freed, then one of ``big_mib`` MiB (see the module doc)."""
    a = _recording()
    live = [a.malloc(6 * MiB) for _ in range(120)]
    for i, x in enumerate(live):
        if i % 3 != 2:
            a.free(x)
    try:
        a.malloc(big_mib * MiB)
    except OutOfMemoryError:
        pass
    return a.snapshot()


def shortage_run(big_mib: int = 900, then_mib: int = 0) -> dict:
    """The same workload asking for more than every free byte: a shortage.  With ``then_mib``, the
    program catches the error and goes on to keep ``then_mib`` MiB more live (6 MiB tensors): the rest
    of the run needs more than the failure did."""
    if not then_mib:
        return fragmentation_run(big_mib)
    a = _recording()
    live = [a.malloc(6 * MiB) for _ in range(120)]
    for i, x in enumerate(live):
        if i % 3 != 2:
            a.free(x)
    try:
        a.malloc(big_mib * MiB)
    except OutOfMemoryError:
        pass
    live += [a.malloc(6 * MiB) for _ in range(then_mib // 6)]
    return a.snapshot()


def _rank(rank: int, steps: int, growing: bool) -> dict:
    """One rank: ``steps`` kept activations of about 6 MiB, each with a temporary freed at once.

    The temporaries are 44 MiB, or with ``growing`` 22, 24, ... up to 44 MiB: each one a
    little larger than the last, so no cached block serves it and each takes a new segment,
    left cached when it is freed.  The live memory is the same at its peak (the last
    temporary and every activation); it is laid out worse.
    """
    a = _recording()
    kept = []
    for i in range(steps):
        kept.append(a.malloc(6 * MiB + rank * 4096))          # each rank a little different
        tmp = a.malloc((22 + 2 * i if growing else 22 + 2 * (steps - 1)) * MiB)
        a.free(tmp)
    for x in kept:
        a.free(x)
    return a.snapshot()


def job_ranks(n: int = 4, outlier: int = 3, why: str = "more live memory") -> list:
    """Snapshots of ``n`` ranks of one job; rank ``outlier`` holds more live memory
    (``why="more live memory"``: twice the activations) or lays the same out worse
    (``why="laid out worse"``: growing temporaries)."""
    if why not in ("more live memory", "laid out worse"):
        raise ValueError(f"why is 'more live memory' or 'laid out worse', got {why!r}")
    out = []
    for r in range(n):
        odd = r == outlier
        if odd and why == "more live memory":
            out.append(_rank(r, 24, growing=False))
        else:
            out.append(_rank(r, 12, growing=odd))
    return out


def long_context_rank(steps: int = 12) -> dict:
    """``job_ranks``' program with every tensor 16 times larger (a 16x longer sequence), on a T4."""
    a = _recording("t4-16gb")
    kept = []
    for i in range(steps):
        kept.append(a.malloc(96 * MiB))
        a.free(a.malloc(16 * (22 + 2 * (steps - 1)) * MiB))
    for x in kept:
        a.free(x)
    return a.snapshot()


def big_expandable_run(held_gib: int = 150, total_gib: int = 200) -> dict:
    """``expandable_segments:True`` holding about ``held_gib`` GiB on a ``total_gib`` GiB simulated GPU."""
    a = _recording("h200-141gb", "expandable_segments:True", total_gib * GiB)
    live = [a.malloc(GiB - 3 * MiB) for _ in range(held_gib)]
    for x in live[::3]:
        a.free(x)
    live += [a.malloc(512 * MiB) for _ in range(held_gib // 4)]
    return a.snapshot()
