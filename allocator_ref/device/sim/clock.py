"""The virtual clock: host time, streams as queues of timed kernels, events.

Time is in microseconds and only moves when the model says so, so every run
of a lesson prints the same numbers.

* The **host clock** (``Timeline.host_us``) advances by the cost of each API
  call and jumps forward when the host waits (a synchronize, or cudaFree's
  implicit device-wide sync).
* Each **stream** has a ``tail_us``: the time its last queued kernel ends.
  A kernel issued at host time ``t`` starts at ``max(t, stream.tail_us)``
  (plus any event the stream was told to wait for) and ends ``duration``
  later.  Issuing it costs the host a launch overhead (cudaLaunchKernel).
* A kernel's **effect on memory** (the bytes it writes) happens at its start
  time.  Effects wait in a heap ordered by ``(start, seq)`` and run once the
  host clock reaches their start -- so a kernel queued behind a long sleep on
  stream B runs *after* a kernel issued later on an idle stream A.  That is
  the whole mechanism behind the cross-stream corruption lessons.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Callable, Optional

from ..errors import cuda_error


class Timeline:
    """Host clock plus the heap of kernel effects not yet applied."""

    def __init__(self) -> None:
        self.host_us = 0.0
        self._pending: list = []          # heap of (start_us, seq, effect)
        self._seq = itertools.count()

    def spend(self, microseconds: float) -> None:
        """The host is busy inside an API call for ``microseconds``."""
        self.host_us += microseconds
        self.run_due()

    def wait_until(self, t_us: float) -> float:
        """The host blocks until ``t_us``; returns how long it waited."""
        waited = max(0.0, t_us - self.host_us)
        self.host_us += waited
        self.run_due()
        return waited

    def schedule(self, start_us: float, effect: Optional[Callable[[], None]]) -> None:
        """Queue a kernel's effect on memory to happen at ``start_us``."""
        if effect is not None:
            heapq.heappush(self._pending, (start_us, next(self._seq), effect))
        self.run_due()

    def run_due(self) -> None:
        """Apply, in start order, every effect whose start time has come.

        An effect that fails (a kernel touching an unmapped address) is
        dropped and its CudaError surfaces here, in whatever call observed
        it -- like an asynchronous kernel error on a GPU.
        """
        while self._pending and self._pending[0][0] <= self.host_us:
            _, _, effect = heapq.heappop(self._pending)
            effect()

    @property
    def pending(self) -> int:
        return len(self._pending)


class SimStream:
    """A simulated ``cudaStream_t``: ``handle`` is the raw number a trace records."""

    def __init__(self, device, handle: int) -> None:
        self.device = device
        self.handle = handle
        self.tail_us = 0.0          # when the last queued work on this stream ends
        self.destroyed = False

    def synchronize(self) -> None:                       # cudaStreamSynchronize
        self.device._stream_synchronize(self)

    def query(self) -> bool:                             # cudaStreamQuery
        self.device._check_stream(self)
        return self.device._clock.host_us >= self.tail_us

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else f"busy until {self.tail_us:.1f} us"
        return f"<SimStream handle={self.handle:#x} {state} (simulated)>"


class SimEvent:
    """A simulated ``cudaEvent_t``.  It completes when its stream reaches it."""

    def __init__(self, device, timing: bool = True) -> None:
        self.device = device
        self.timing = timing
        self.time_us: Optional[float] = None     # completion time of the last record
        self.captured = None                     # (capture, nodes) when recorded inside a graph capture

    def record(self, stream=None) -> None:               # cudaEventRecord
        s = self.device._check_stream(stream)
        self.device._check_event(self)
        if self.device._captures and self.device._capture_event_record(self, s):
            return                               # a node of the graph, not a time (graphs.py)
        self.captured = None
        self.time_us = max(self.device._clock.host_us, s.tail_us)

    def query(self) -> bool:                             # cudaEventQuery
        self.device._check_event(self)
        self.device._check_capture_safe("cudaEventQuery")
        # A never-recorded event reports cudaSuccess, as in CUDA.
        return self.time_us is None or self.device._clock.host_us >= self.time_us

    def synchronize(self) -> None:                       # cudaEventSynchronize
        self.device._check_event(self)
        self.device._check_capture_safe("cudaEventSynchronize")
        if self.time_us is not None:
            self.device._clock.wait_until(self.time_us)
            self.device._after_host_sync()

    def elapsed_time_ms(self, end: "SimEvent") -> float:  # cudaEventElapsedTime(self, end)
        self.device._check_event(self)
        self.device._check_event(end)
        for ev in (self, end):
            if not ev.timing:
                raise cuda_error("cudaErrorInvalidResourceHandle",
                                 "elapsed_time_ms needs events created with timing=True")
            if ev.time_us is None:
                raise cuda_error("cudaErrorInvalidResourceHandle",
                                 "elapsed_time_ms on an event that was never recorded")
            if not ev.query():
                raise cuda_error("cudaErrorNotReady",
                                 "the event has not completed yet; synchronize on it first")
        return (end.time_us - self.time_us) / 1000.0

    def __repr__(self) -> str:
        when = "never recorded" if self.time_us is None else f"completes at {self.time_us:.1f} us"
        return f"<SimEvent {when} (simulated)>"
