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

``map_forked`` is the other way, for one big file already loaded (``doctor`` of a 1 GB snapshot of
many devices): its workers are *forked*, so they share the loaded run with this process page by
page (copy-on-write) instead of reading it again.  It forks only when this process runs one
thread (a command line, not a notebook kernel).  The caller freezes what it loaded first
(``gc.freeze()``: the doctor's ``settled``), so no worker's collector writes to the shared pages;
each worker exits after a few inputs, so the pages it touched and copied are given back.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
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


TASKS_PER_FORK = 4        # inputs a forked worker handles before it exits (and gives back its copied pages)


def can_fork() -> bool:
    """Whether forking is safe here: a platform that forks, and no thread but this one."""
    return hasattr(os, "fork") and threading.active_count() == 1


def map_forked(fn: Callable, items: Sequence, workers: int) -> list:
    """``[fn(item) for item in items]`` in forked workers that inherit what ``fn`` reads (see the
    module doc); in this process when one worker, one input, or forking is not safe."""
    if workers <= 1 or len(items) <= 1 or not can_fork():
        return [fn(item) for item in items]
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=TASKS_PER_FORK) as pool:
        return pool.map(fn, items, chunksize=1)
