"""The simulated GPU a replay runs on: one ``TraceDevice`` that follows the recorded trace.

A ``TraceDevice`` is a ``SimDevice`` that knows the trace being replayed.  In both of the
replay engine's modes (engine.py) it puts new segments where PyTorch's cudaMalloc put them
and lets the replay complete the events a ``record_stream`` free waits on
(``ManualEvent``) where the trace says; the modes differ in who decides what fails:

* **verify** (``follows_script=True``): the trace does.  It hands out the addresses
  PyTorch's cudaMalloc / cuMemAddressReserve returned, in the trace's order (the
  ``segment_alloc`` / first ``segment_map`` of a segment); a device allocation succeeds
  exactly when the trace shows the segment it made next, and fails when the trace shows a
  release or an ``oom`` next -- so the allocator walks the same retry ladder it walked on
  the GPU.  Every event is manual.
* **what-if**: the capacity does (``usable`` bytes, a real SimDevice charge).  A new
  segment goes where PyTorch put the segment of that size for this malloc when that range
  is free here (``planned``), else wherever the simulated device places it.

``make_device`` in stage.py is the one place a replay builds one.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from typing import Optional

from ..device.errors import cuda_error
from ..device.sim import SimDevice


class ManualEvent:
    """An event the replay completes where the trace says (``free_completed``), or, in a what-if,
    where the program's stream work completed (whatif.py)."""

    def __init__(self, device=None) -> None:
        self.device = device
        self.ready = False

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return self.ready

    def synchronize(self) -> None:
        self.ready = True


class ManyStreamsDevice(SimDevice):
    """A SimDevice whose cudaFree waits for every stream in O(1), however many there are.

    cudaFree waits for every stream (SimDevice._implicit_sync asks _drain_time).  A trace
    may name tens of thousands of streams and free a segment thousands of times: scanning
    them all each time made the replay quadratic (223 s for 100,000 events with a stream
    per allocation).  A stream's tail only grows, so the running maximum of every tail
    ever set, destroyed streams' included, is the same answer.  The decisions and the
    simulated clock are exactly SimDevice's.
    """

    def __init__(self, profile: str, index: int = 0) -> None:
        self._latest_tail = 0.0                   # the latest any stream's queued work ends
        super().__init__(profile, index=index)

    def _drain_time(self) -> float:
        return max(self._latest_tail, self._destroyed_tail)

    def create_stream(self, handle: Optional[int] = None):
        stream = super().create_stream(handle)
        self._latest_tail = max(self._latest_tail, stream.tail_us)
        return stream

    def wait_event(self, stream, event) -> None:
        super().wait_event(stream, event)
        self._latest_tail = max(self._latest_tail, self._check_stream(stream).tail_us)

    def _launch(self, stream, duration_us: float, effect=None):
        start, end = super()._launch(stream, duration_us, effect)
        self._latest_tail = max(self._latest_tail, end)
        return start, end


class TraceDevice(ManyStreamsDevice):
    """A SimDevice the replay steers: planned addresses, manual events, and in verify mode
    planned failures (see the module doc)."""

    def __init__(self, profile: str, index: int = 0, *, follows_script: bool = True,
                 total_memory: Optional[int] = None) -> None:
        super().__init__(profile, index=index)
        if total_memory is not None:
            self.info = dataclasses.replace(self.info, total_memory=int(total_memory))
        self.follows_script = follows_script
        self.planned_segments: deque = deque()   # verify: (addr, size, action) of upcoming segment_alloc/map
        self.planned: deque = deque()            # what-if: (addr, size) PyTorch's cudaMalloc returned next
        self.script: Optional[list] = None       # verify: the trace, while a malloc is replayed ...
        self.script_pos = 0                      # ... and the next event it should produce
        self.events_by_addr: dict = {}           # trace address of a deferred free -> its events
        self.freeing_addr: Optional[int] = None
        self._replay_reservations: dict = {}      # base -> (nominal size, claimed in the address space)
        self._extent: dict = {}                   # base -> highest mapped end so far
        self.largest_malloc = 0                   # the largest cudaMalloc served (memory_doctor/unchanged.py)
        self.set_address_hint(self._hint_address if follows_script else self._pytorch_address)

    # ------------------------------------------------------------ where new memory goes
    def _hint_address(self, kind: str, size: int) -> Optional[int]:
        if kind == "malloc":
            while self.planned_segments and self.planned_segments[0][2] != "segment_alloc":
                self.planned_segments.popleft()
            if self.planned_segments and self.planned_segments[0][1] == size:
                return self._free_or_none(self.planned_segments.popleft()[0], size)
            return None
        # A new expandable segment's first map is at its base: the planned map that does not
        # fall inside a reservation we already have is where this one starts.
        for addr, _size, action in self.planned_segments:
            if action == "segment_map" and not self._in_a_reservation(addr):
                return addr
        return None

    def _pytorch_address(self, kind: str, size: int) -> Optional[int]:
        """What-if: PyTorch's address for a cudaMalloc of this size in this malloc, if free here."""
        if kind != "malloc":
            return None          # a reservation made during the what-if goes where the device puts it
        for k, (addr, planned_size) in enumerate(self.planned):
            if planned_size == size and not self._space.overlapping(addr, size):
                del self.planned[k]
                return addr
        return None

    def _free_or_none(self, addr: int, size: int) -> Optional[int]:
        # After a divergence the planned address may still be in use here: place it elsewhere
        # (the replay reports the divergence) rather than fail the device call.
        return None if self._space.overlapping(addr, size) else addr

    # ------------------------------------------------------------ verify: the trace decides
    def _maybe_fail(self, name: str, succeeds_before: str) -> None:
        # Follow the script: a device allocation succeeded on the GPU exactly when the next
        # thing the trace shows is the segment it made.  If the trace shows a release or an
        # oom next, cudaMalloc / cuMemCreate failed there, and so it does here.
        if self.script is None:
            return
        nxt = self.script[self.script_pos]["action"] if self.script_pos < len(self.script) else None
        if nxt != succeeds_before:
            raise cuda_error(name, "replay: this call failed on the GPU that recorded the trace")

    def malloc(self, nbytes: int) -> int:
        self._maybe_fail("cudaErrorMemoryAllocation", "segment_alloc")
        ptr = super().malloc(nbytes)
        self.largest_malloc = max(self.largest_malloc, nbytes)
        return ptr

    def mem_create(self, size: int) -> int:
        self._maybe_fail("CUDA_ERROR_OUT_OF_MEMORY", "segment_map")
        return super().mem_create(size)

    def _charge(self, nbytes: int, error: str, call: str) -> None:
        if not self.follows_script:
            return super()._charge(nbytes, error, call)      # what-if: the capacity decides
        # Which calls failed is decided by the trace (the script), not by a capacity.
        self._used += nbytes

    # The trace tells where each expandable segment's address range started, not how long
    # it was (1.125x the recording GPU's memory, which a snapshot does not record).  So
    # reservations at PyTorch's bases are kept apart from the address space: two may overlap,
    # only the pages mapped into them may not (mem_map still checks that).  That holds in
    # verify mode, and in a what-if for the reservations that existed at the first event
    # (rebuild_expandable.py plans their bases): an uncapped what-if GPU spans 1.125 TiB, so
    # the large pool's reservation would otherwise cover the small pool's real base, and the
    # rebuild failed ("landed elsewhere") with every what-if row of the run.
    def address_reserve(self, size: int, alignment: int = 0) -> int:
        planned = self._hint_address("reserve", size) if self.follows_script else self._start_reservation()
        if planned is None:
            return super().address_reserve(size, alignment)
        self.counters.vmm_calls += 1
        # Take the range in the address space too when it is free, so that a later
        # reservation placed without a plan does not land on it.
        claimed = not self._space.overlapping(planned, size)
        if claimed:
            self._space.claim(planned, size)
        self._replay_reservations[planned] = (size, claimed)
        return planned

    def _start_reservation(self) -> Optional[int]:
        """What-if: the base of a reservation that existed at the first event, where PyTorch's
        began (rebuild_expandable plans it; None for any other reservation)."""
        return next((a for a, _s, action in self.planned_segments if action == "segment_map"), None)

    def address_free(self, ptr: int, size: int) -> None:
        entry = self._replay_reservations.get(ptr)
        if entry is None or entry[0] != size:
            return super().address_free(ptr, size)
        # Only pages up to this segment's mapped extent are its own (another, overlapping
        # reservation may have pages beyond it).
        if self._pages.overlapping(ptr, max(self._extent.get(ptr, ptr) - ptr, 1)):
            raise cuda_error("CUDA_ERROR_INVALID_VALUE", f"address_free({ptr:#x}): still mapped")
        self.counters.vmm_calls += 1
        del self._replay_reservations[ptr]
        self._extent.pop(ptr, None)
        if entry[1]:
            self._space.release(ptr)

    def _reservation_holding(self, ptr: int, size: int):
        for start, (length, _claimed) in self._replay_reservations.items():
            if start <= ptr and ptr + size <= start + length:
                return start, length
        return super()._reservation_holding(ptr, size)

    def _in_a_reservation(self, addr: int) -> bool:
        # A segment grows from its base, lowest unmapped range first: a map inside an existing
        # segment starts at most where its mapped extent ever reached.  (The nominal size of a
        # reservation here may exceed the recording GPU's, so it cannot be the test.)
        return any(start <= addr <= self._extent.get(start, start)
                   for start in self._replay_reservations)

    def mem_map(self, ptr: int, size: int, handle: int, offset: int = 0) -> None:
        super().mem_map(ptr, size, handle, offset)
        for start, (length, _claimed) in self._replay_reservations.items():
            if start <= ptr < start + length:
                self._extent[start] = max(self._extent.get(start, start), ptr + size)

    # ------------------------------------------------------------ events the replay completes
    def create_event(self, timing: bool = True):
        if not self.follows_script and self.freeing_addr is None:
            return super().create_event(timing)      # what-if: an ordinary event (a sync, say)
        event = ManualEvent(self)
        if self.freeing_addr is not None:
            self.events_by_addr.setdefault(self.freeing_addr, []).append(event)
        return event
