"""The device's virtual address space: which ranges are taken, which are free.

This is bookkeeping only (no bytes): cudaMalloc, cuMemAddressReserve,
pinned-memory mappings and IPC imports all take a range here.  Free space is
kept as "holes" in two sorted structures so that every operation is
O(log n), whatever the number of live allocations:

* ``_holes`` -- hole start -> hole end, to merge a freed range with its neighbours;
* ``_by_size`` -- ``(size, start)`` of every hole, to find the best fit.

Live ranges are kept in ``_live`` (start -> end) to answer "which allocation
contains this pointer?" and "does this requested address overlap anything?".

The window grows with what is asked of it: a request no hole holds doubles the
window (or more, to fit), up to ``limit``.  A replay needs one expandable
segment's reservation (the device's size) per stream and pool, so a fixed
window ran out at about 180 streams on an 80 GiB profile, or at two streams of a
15,000 GiB device; the limit (2**63, a 64-bit pointer's positive range) is
beyond any of those, but not beyond every product of streams and device size: 7,000
streams of a 1 PiB device need more.  What does not fit is refused with
:class:`AddressSpaceFull`, which says what took the room and what to do (a smaller
device), and which the allocator does not mistake for an out-of-memory it could
retry: PyTorch's ``cuMemAddressReserve`` failure is not one either (C10_CUDA_DRIVER_CHECK).
"""
from __future__ import annotations

from typing import Optional

from sortedcontainers import SortedDict, SortedList

from ..errors import CudaError


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


ADDRESS_LIMIT = 1 << 63     # the window never grows past this address
GiB = 1 << 30


def _bytes(n: int) -> str:
    for unit, size in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:,.3g} {unit}"
    return f"{n:,} B"


class AddressSpaceFull(CudaError):
    """No room is left in the simulated device's virtual address space (its 2**63 bytes).

    A CudaError (the call failed: CUDA_ERROR_OUT_OF_MEMORY, as cuMemAddressReserve answers), but not
    a CudaOutOfMemoryError: the allocator must not take it for a device that ran out of memory and
    walk its retry ladder, and a replay must not count it as an OOM of the program it replays.
    Its text leads with what happened and what to do, in under 200 characters (a report may keep only
    the start of its first line)."""

    def __init__(self, call: str, size: int, space: "AddressSpace", device_memory: int) -> None:
        held, ranges, room = space.held(), len(space.live_ranges()), space.limit - space.base
        per_gib = room * 8 // 9 // GiB              # segments of 1.125x a 1 GiB device that fit: divide by the GiB
        super().__init__("CUDA_ERROR_OUT_OF_MEMORY", "")
        text = (f"{call}: {_bytes(room)} of simulated addresses hold only {ranges:,} ranges of "
                f"{_bytes(size)}: use --device-memory below {per_gib:,} / (streams x pools) GiB, or no "
                f"expandable segments. (Each stream's and pool's expandable segment reserves 1.125x the "
                f"device's memory, {_bytes(device_memory)}; {_bytes(held)} are taken; {self.name})")
        self.detail = text
        self.args = (text,)


class AddressSpace:
    """Best-fit placement of ranges inside ``[base, base + size)``, growing up to ``limit``."""

    def __init__(self, base: int, size: int, limit: int = ADDRESS_LIMIT) -> None:
        self.base, self.end = base, base + size
        self.limit = max(limit, self.end)
        self._holes = SortedDict({base: base + size})
        self._by_size = SortedList([(size, base)])
        self._live = SortedDict()

    # --- holes -------------------------------------------------------------
    def _add_hole(self, start: int, end: int) -> None:
        if end > start:
            self._holes[start] = end
            self._by_size.add((end - start, start))

    def _remove_hole(self, start: int) -> int:
        end = self._holes.pop(start)
        self._by_size.remove((end - start, start))
        return end

    def _fits(self, hole_start: int, hole_end: int, size: int, alignment: int) -> Optional[int]:
        start = round_up(hole_start, alignment)
        return start if start + size <= hole_end else None

    def _best_hole(self, size: int, alignment: int) -> Optional[tuple[int, int]]:
        """The smallest hole that holds ``size`` bytes at ``alignment``."""
        i = self._by_size.bisect_left((size, -1))
        if i < len(self._by_size):                      # usually the first candidate fits
            hole_size, hole_start = self._by_size[i]
            if self._fits(hole_start, hole_start + hole_size, size, alignment) is not None:
                return hole_start, hole_start + hole_size
        # Otherwise ask for room for the worst-case alignment padding.
        i = self._by_size.bisect_left((size + alignment - 1, -1))
        if i < len(self._by_size):
            hole_size, hole_start = self._by_size[i]
            return hole_start, hole_start + hole_size
        return None

    # --- public ------------------------------------------------------------
    def _grow(self, size: int, alignment: int) -> bool:
        """Widen the window so that a hole can hold ``size`` at ``alignment``; False at the limit."""
        want = self.end + max(self.end - self.base, size + alignment)
        new_end = min(want, self.limit)
        if new_end <= self.end:
            return False
        old_end, self.end = self.end, new_end
        # The new room, minus any range a trace claimed out there (claim() accepts addresses
        # outside the window), joined to the hole that ended at the old edge.
        start = old_end
        for s in list(self._live.irange(minimum=None, maximum=new_end, inclusive=(True, False))):
            e = self._live[s]
            if e <= start:
                continue
            self._add_edge_hole(start, min(s, new_end))
            start = max(start, e)
        self._add_edge_hole(start, new_end)
        return True

    def _add_edge_hole(self, start: int, end: int) -> None:
        if end <= start:
            return
        i = self._holes.bisect_left(start)
        if i > 0:
            prev = self._holes.keys()[i - 1]
            if self._holes[prev] == start:
                start = prev
                self._remove_hole(prev)
        self._add_hole(start, end)

    def allocate(self, size: int, alignment: int) -> Optional[int]:
        """Take ``size`` bytes at an ``alignment``-aligned address, or None if no hole fits
        even in a window grown to ``limit``."""
        hole = self._best_hole(size, alignment)
        while hole is None:
            if not self._grow(size, alignment):
                return None
            hole = self._best_hole(size, alignment)
        hole_start, hole_end = hole
        start = self._fits(hole_start, hole_end, size, alignment)
        self._remove_hole(hole_start)
        self._add_hole(hole_start, start)               # padding in front stays free
        self._add_hole(start + size, hole_end)          # so does the rest
        self._live[start] = start + size
        return start

    def overlapping(self, start: int, size: int) -> Optional[tuple[int, int]]:
        """A live range overlapping ``[start, start+size)``, or None."""
        i = self._live.bisect_right(start)
        if i > 0:
            s = self._live.keys()[i - 1]
            if self._live[s] > start:
                return s, self._live[s]
        if i < len(self._live):
            s = self._live.keys()[i]
            if s < start + size:
                return s, self._live[s]
        return None

    def claim(self, start: int, size: int) -> None:
        """Take exactly ``[start, start+size)`` (an address requested by a trace).

        The caller checked :meth:`overlapping` first.  Addresses outside the
        managed window are accepted too: real traces use whatever the driver
        gave them.
        """
        end = start + size
        i = self._holes.bisect_right(start)
        first = self._holes.keys()[i - 1] if i > 0 else None
        starts = ([first] if first is not None and self._holes[first] > start else [])
        starts += [s for s in self._holes.irange(start, end, inclusive=(True, False)) if s != first]
        for hole_start in starts:
            hole_end = self._remove_hole(hole_start)
            self._add_hole(hole_start, min(hole_end, start))
            self._add_hole(max(hole_start, end), hole_end)
        self._live[start] = end

    def release(self, start: int) -> None:
        """Give back a live range, merging it with free neighbours."""
        end = self._live.pop(start)
        if start < self.base or end > self.end:         # a claimed range outside the window
            start, end = max(start, self.base), min(end, self.end)
            if start >= end:
                return
        i = self._holes.bisect_left(start)
        if i > 0:                                        # merge with the hole before
            prev = self._holes.keys()[i - 1]
            if self._holes[prev] == start:
                start = prev
                self._remove_hole(prev)
        if end in self._holes:                           # merge with the hole after
            end = self._remove_hole(end)
        self._add_hole(start, end)

    def containing(self, ptr: int) -> Optional[tuple[int, int]]:
        """The live range that contains ``ptr``, or None."""
        i = self._live.bisect_right(ptr)
        if i == 0:
            return None
        start = self._live.keys()[i - 1]
        end = self._live[start]
        return (start, end) if ptr < end else None

    def live_ranges(self) -> list[tuple[int, int]]:
        return list(self._live.items())

    def held(self) -> int:
        """The bytes of every live range."""
        return sum(end - start for start, end in self._live.items())
