"""Run one function over many inputs on every core this process may use, results in input order.

``doctor FOLDER`` diagnoses each rank's snapshot on its own (ranks.py), and each is seconds of
replays on one core: a job's folder of eight ranks keeps one core busy while the others idle.
Here the inputs are spread over a pool of processes, never more than the cores the machine lends
this process (``os.sched_getaffinity``: a container or ``taskset`` may lend fewer than it has) nor
than the ``workers`` course setting (``ALLOCATOR_REF_WORKERS``), so memory stays bounded: each
worker holds one snapshot at a time.

The workers are *spawned*, not forked: a notebook kernel or a test runner has threads, and a fork
copies their locks in whatever state they were.  A spawned worker starts from the environment
(the settings travel there) and the arguments it is given (the language, passed explicitly).
One worker, or one input, runs in this process: no pool, the same function, the same results.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

from .. import settings


def cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def worker_count(jobs: int) -> int:
    """How many processes to run ``jobs`` inputs on: the cores, capped by the setting and the inputs."""
    cap = settings.value("workers")
    most = cores() if cap == "auto" else min(int(cap), cores())
    return max(1, min(most, jobs))


def map_in_order(fn: Callable, items: Sequence, workers: int) -> list:
    """``[fn(*item) for item in items]``, spread over ``workers`` processes.

    ``fn`` must be a module-level function and catch its own errors (one rank's bad file is one
    line of the report, ranks.py); an exception that escapes it, or a worker that dies (killed for
    memory), is raised here, as the loop would.
    """
    if workers <= 1 or len(items) <= 1:
        return [fn(*item) for item in items]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(fn, *item) for item in items]
        return [f.result() for f in futures]
