"""TensorFlow / XLA's best-fit-with-coalescing allocator (``xla/tsl/framework/bfc_allocator.cc``).

The pieces, each mirrored below:

* **Regions** (``AllocationRegion``): backing memory from the sub-allocator
  (here ``cudaMalloc``).  With ``allow_growth`` the first region is 2 MiB and
  each new one doubles (``Extend``); the first time the device says no, the
  size backs off to 90 % again and again (``kBackpedalFactor``) until it fits
  or gets smaller than the request.  Without ``allow_growth`` one region of
  the whole ``memory_limit`` is taken (on the first request, as ``Extend``
  does; JAX's 75 % preallocation is this mode).
* **Chunks** tile each region exactly, linked to their physical neighbours
  (``prev``/``next``).  A chunk is wholly free or wholly in use.
* **Rounding**: every request becomes a multiple of 256 B (``kMinAllocationBits = 8``).
* **Bins**: 21 bins; bin *i* keeps the free chunks of size in
  ``[256·2^i, 256·2^(i+1))`` (the last one everything from 256 MiB), ordered
  by (size, address).  Looking from the request's bin upwards, the first
  chunk that fits is the best fit, lowest address on ties (``FindChunkPtr``).
* **Split**: the found chunk is cut when it is at least twice the rounded
  request or the leftover would be at least 128 MiB
  (``kMaxInternalFragmentation``); otherwise the caller gets all of it.
* **Coalescing**: a freed chunk merges with free neighbours in its region
  (``FreeAndMaybeCoalesce``) before it goes back into its bin.
* **garbage_collection**: before failing, give whole free regions back so the
  sub-allocator can make a bigger one (``DeallocateFreeRegions``).

Streams: BFC does not know about streams.  XLA keeps reuse safe with one
compute stream per device and a "safe frontier" counter, not with events.  So
memory freed here is reused at once by any stream: exactly the hazard the
course's stream chapter shows.  ``record_stream`` is honoured the PyTorch way
(the free waits for one event per using stream) so the policies stay
interchangeable.
"""
from __future__ import annotations

from typing import Any, Optional

from sortedcontainers import SortedList

from allocator_ref.allocation import Allocation
from allocator_ref.device.errors import CudaOutOfMemoryError

from allocator_ref.front_door import check_request_size

from .common import (MiB, PolicyAllocator, check_byte_option,
                     format_size, OutOfMemoryError, parse_config, round_up, stat_keys)

kMinAllocationBits = 8
kMinAllocationSize = 1 << kMinAllocationBits       # 256 B
kNumBins = 21
kMaxInternalFragmentation = 128 * MiB
kBackpedalFactor = 0.9
kInitialRegion = 2 * MiB

DEFAULTS = {
    "memory_limit": 0,               # 0: the device's free memory when the allocator is built
    "allow_growth": True,
    "garbage_collection": False,
}


def rounded_bytes(nbytes: int) -> int:
    """``BFCAllocator::RoundedBytes``: a multiple of 256, at least 256."""
    return round_up(nbytes, kMinAllocationSize)


def bin_num_for_size(nbytes: int) -> int:
    """``BinNumForSize``: floor(log2(bytes / 256)), capped at the last bin."""
    return min(kNumBins - 1, max(nbytes >> kMinAllocationBits, 1).bit_length() - 1)


def bin_size(index: int) -> int:
    """``BinNumToSize``: the smallest chunk size bin ``index`` holds."""
    return kMinAllocationSize << index


class Region:
    """``AllocationRegion``: one piece of memory from the sub-allocator."""

    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size = ptr, size


class Chunk:
    """``BFCAllocator::Chunk``: a piece of a region, free or in use, linked to its neighbours."""

    __slots__ = ("ptr", "size", "region", "requested_size", "in_use", "prev", "next",
                 "bin", "allocation_id", "stream", "stream_uses")

    def __init__(self, ptr: int, size: int, region: Region) -> None:
        self.ptr, self.size, self.region = ptr, size, region
        self.requested_size = 0
        self.in_use = False
        self.prev: Optional[Chunk] = None
        self.next: Optional[Chunk] = None
        self.bin: Optional[int] = None       # which bin holds it while free
        self.allocation_id = -1
        self.stream = None
        self.stream_uses: list = []


class BFCAllocator(PolicyAllocator):
    """Best-fit with coalescing over growing regions (TensorFlow's GPU allocator, XLA's and JAX's)."""

    ROUND = kMinAllocationSize
    STAT_KEYS = stat_keys(
        ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes",
         "active_bytes", "requested_bytes"),
        counters=("num_device_alloc", "num_device_free", "num_ooms", "num_sync_all_streams"))

    def __init__(self, device: Any, config: Any = None, **options: Any) -> None:
        super().__init__(device)
        self.options = parse_config(options, parse_config(config, DEFAULTS))
        # Above the device's memory is allowed: Extend backs off by 0.9 until a region fits.
        limit = check_byte_option("memory_limit", self.options["memory_limit"], 0)
        if 0 < limit < kMinAllocationSize:
            # Every chunk is a multiple of 256 B (kMinAllocationSize): such a limit holds nothing,
            # and would fail only at the first malloc.
            raise ValueError(f"BFCAllocator: memory_limit={limit} bytes is below the {kMinAllocationSize}-byte "
                             "smallest chunk, so no allocation could ever fit; give at least "
                             f"{kMinAllocationSize} bytes, or 0 for the device's free memory")
        self.memory_limit = limit or device.mem_get_info()[0]
        # The constructor's choice of the first region size (BFCAllocator::BFCAllocator).
        if self.options["allow_growth"]:
            self.curr_region_allocation_bytes = rounded_bytes(min(self.memory_limit, kInitialRegion))
        else:
            self.curr_region_allocation_bytes = rounded_bytes(self.memory_limit)
        self.started_backpedal = False
        self.regions: list[Region] = []          # in address order
        self.bins = [SortedList() for _ in range(kNumBins)]   # (size, ptr) of free chunks
        self._chunks: dict[int, Chunk] = {}      # ptr -> chunk (free and in use)
        self._next_allocation_id = 1

    @classmethod
    def jax_default(cls, device: Any, fraction: float = 0.75) -> "BFCAllocator":
        """JAX's default: preallocate ``fraction`` of *total* memory as one region (XLA_PYTHON_CLIENT_MEM_FRACTION)."""
        _free, total = device.mem_get_info()
        return cls(device, memory_limit=int(fraction * total), allow_growth=False)

    @property
    def total_region_allocated_bytes(self) -> int:
        return self.memory_reserved()

    # ------------------------------------------------------------------ bins
    def _insert_free_chunk(self, chunk: Chunk) -> None:
        """``InsertFreeChunkIntoBin``."""
        chunk.bin = bin_num_for_size(chunk.size)
        self.bins[chunk.bin].add((chunk.size, chunk.ptr))

    def _remove_free_chunk(self, chunk: Chunk) -> None:
        """``RemoveFreeChunkFromBin``."""
        self.bins[chunk.bin].remove((chunk.size, chunk.ptr))
        chunk.bin = None

    def _find_chunk(self, rounded: int, nbytes: int) -> Optional[Chunk]:
        """``FindChunkPtr``: the first fit from the request's bin upwards is the best fit."""
        for index in range(bin_num_for_size(rounded), kNumBins):
            fit = next(iter(self.bins[index].irange((rounded, -1))), None)   # (size, ptr) >= the request
            if fit is not None:
                return self._use_chunk(self._chunks[fit[1]], rounded, nbytes)
        return None

    def _use_chunk(self, chunk: Chunk, rounded: int, nbytes: int) -> Chunk:
        """Take a free chunk out of its bin, split it if the rule says so, mark it in use."""
        self._remove_free_chunk(chunk)
        if chunk.size >= 2 * rounded or chunk.size - rounded >= kMaxInternalFragmentation:
            self._split_chunk(chunk, rounded)
        chunk.requested_size = nbytes
        chunk.in_use = True
        chunk.allocation_id = self._next_allocation_id
        self._next_allocation_id += 1
        return chunk

    def _split_chunk(self, chunk: Chunk, nbytes: int) -> None:
        """``SplitChunk``: the first ``nbytes`` stay; the rest becomes a new free chunk."""
        rest = Chunk(chunk.ptr + nbytes, chunk.size - nbytes, chunk.region)
        chunk.size = nbytes
        rest.prev, rest.next = chunk, chunk.next
        if chunk.next is not None:
            chunk.next.prev = rest
        chunk.next = rest
        self._chunks[rest.ptr] = rest
        self._insert_free_chunk(rest)

    # ------------------------------------------------------------------ regions
    def _extend(self, rounded: int) -> bool:
        """``Extend``: get a new region big enough for ``rounded`` bytes, within ``memory_limit``."""
        available = (self.memory_limit - self.total_region_allocated_bytes) // kMinAllocationSize * kMinAllocationSize
        if rounded > available:
            return False
        increased = False
        while rounded > self.curr_region_allocation_bytes:
            self.curr_region_allocation_bytes *= 2
            increased = True
        nbytes = min(self.curr_region_allocation_bytes, available)
        ptr = self._sub_alloc(nbytes)
        if ptr is None and not self.started_backpedal:
            self.started_backpedal = True          # only ever back-pedal once
            while ptr is None:
                nbytes = rounded_bytes(int(nbytes * kBackpedalFactor))
                if nbytes < rounded:
                    break
                ptr = self._sub_alloc(nbytes)
        if ptr is None:
            return False
        if not increased:
            self.curr_region_allocation_bytes *= 2  # the next region will be twice as big
        self._add_region(ptr, nbytes)
        return True

    def _sub_alloc(self, nbytes: int) -> Optional[int]:
        """The ``SubAllocator``: cudaMalloc, None when the device is full."""
        try:
            return self.device.malloc(nbytes)
        except CudaOutOfMemoryError:
            return None

    def _add_region(self, ptr: int, nbytes: int) -> None:
        region = Region(ptr, nbytes)
        self.regions.append(region)
        self.regions.sort(key=lambda r: r.ptr)
        chunk = Chunk(ptr, nbytes, region)
        self._chunks[ptr] = chunk
        self._insert_free_chunk(chunk)
        self.stats.num_device_alloc += 1
        self._stat_increase(("segment",), 1)
        self._stat_increase(("reserved_bytes",), nbytes)
        self._emit("segment_alloc", ptr, nbytes, None)

    def _region_chunks(self, region: Region) -> list[Chunk]:
        chunks, chunk = [], self._chunks[region.ptr]
        while chunk is not None:
            chunks.append(chunk)
            chunk = chunk.next
        return chunks

    def _free_regions(self) -> list[Region]:
        # A chunk waiting for record_stream events is still in_use, so its region is not free.
        return [r for r in self.regions if all(not c.in_use for c in self._region_chunks(r))]

    def _deallocate_free_regions(self, rounded: int) -> bool:
        """``DeallocateFreeRegions``: with garbage_collection, give back whole free regions if that can help."""
        if not self.options["garbage_collection"]:
            return False
        free_regions = self._free_regions()
        freed = sum(r.size for r in free_regions)
        if freed == 0 or rounded > self.memory_limit - self.total_region_allocated_bytes + freed:
            return False
        for region in free_regions:
            self._deallocate_region(region)
        return True

    def _deallocate_region(self, region: Region) -> None:
        for chunk in self._region_chunks(region):
            self._remove_free_chunk(chunk)
            del self._chunks[chunk.ptr]
        self.regions.remove(region)
        self.device.free(region.ptr)
        self.stats.num_device_free += 1
        self._stat_decrease(("segment",), 1)
        self._stat_decrease(("reserved_bytes",), region.size)
        self._emit("segment_free", region.ptr, region.size, None)

    # ------------------------------------------------------------------ malloc
    def malloc(self, nbytes: int, stream: Optional[Any] = None) -> Allocation:
        """``AllocateRawInternal``: find, else extend and find, else collect regions and retry, else OOM."""
        self._check_open("malloc")
        size = check_request_size(nbytes)
        stream = self._resolve_stream(stream, "malloc")
        if size == 0:
            return self._null_allocation(stream)
        self._process_events()
        rounded = rounded_bytes(size)
        chunk = (self._find_chunk(rounded, size)
                 or (self._extend(rounded) and self._find_chunk(rounded, size))
                 # not in TF (it has no record_stream): finish frees waiting for events, as PyTorch would
                 or (self._wait_for_deferred() and self._find_chunk(rounded, size))
                 or (self._deallocate_free_regions(rounded) and self._extend(rounded)
                     and self._find_chunk(rounded, size)))
        if not chunk:
            self._raise_oom(size, rounded, stream)
        chunk.stream, chunk.stream_uses = stream, []
        return self._hand_out(chunk, stream)

    def _raise_oom(self, size: int, rounded: int, stream: Any) -> None:
        """TensorFlow's "Allocator (GPU_0_bfc) ran out of memory trying to allocate ..." message."""
        self._trace_oom(rounded, stream)
        index = self.device.info.index
        raise OutOfMemoryError(
            f"Allocator (GPU_{index}_bfc) ran out of memory trying to allocate {format_size(size)} "
            f"(rounded to {rounded}). In use: {format_size(self.memory_allocated())}, "
            f"limit: {format_size(self.memory_limit)}, "
            f"reserved in {len(self.regions)} regions: {format_size(self.memory_reserved())}, "
            f"largest free chunk: {format_size(self.largest_free_chunk())}.")

    def largest_free_chunk(self) -> int:
        sizes = [b[-1][0] for b in self.bins if b]
        return max(sizes, default=0)

    # ------------------------------------------------------------------ free
    def _free_and_coalesce(self, chunk: Chunk) -> None:
        """``FreeAndMaybeCoalesce``: merge with free neighbours, then back into a bin."""
        self._complete_free(chunk)
        chunk.in_use = False
        chunk.allocation_id = -1
        if chunk.next is not None and not chunk.next.in_use:
            self._merge(chunk, chunk.next)
        if chunk.prev is not None and not chunk.prev.in_use:
            left = chunk.prev
            self._merge(left, chunk)
            chunk = left
        self._insert_free_chunk(chunk)

    def _merge(self, left: Chunk, right: Chunk) -> None:
        """``Merge``: ``left`` absorbs its right neighbour (whichever of them is in a bin leaves it)."""
        for c in (left, right):
            if c.bin is not None:
                self._remove_free_chunk(c)
        left.size += right.size
        left.next = right.next
        if right.next is not None:
            right.next.prev = left
        del self._chunks[right.ptr]

    # ------------------------------------------------------------------ streams and events
    def _free_after_events(self, record) -> None:
        """The base's hook: PolicyAllocator.free calls it once no other stream uses the memory."""
        self._free_and_coalesce(record)

    def empty_cache(self) -> None:
        """BFC has no public "empty cache"; here: finish deferred frees, then ``DeallocateRegions``
        on every region that is wholly free (what ``garbage_collection`` does before an OOM)."""
        self._check_open("empty_cache")
        self._wait_for_deferred()
        for region in self._free_regions():
            self._deallocate_region(region)

    # ------------------------------------------------------------------ snapshot and teardown
    def allocator_settings(self) -> dict:
        return {"allocator": "bfc", "memory_limit": self.memory_limit,
                "allow_growth": self.options["allow_growth"],
                "garbage_collection": self.options["garbage_collection"]}

    def _segments(self) -> list[dict]:
        pending = {id(c) for c in self._guard.items()}
        segments = []
        for region in self.regions:
            blocks = []
            for c in self._region_chunks(region):
                state = ("active_pending_free" if id(c) in pending
                         else "active_allocated" if c.in_use else "inactive")
                blocks.append(self._block_dict(c.ptr, c.size, c.requested_size if state != "inactive" else 0,
                                               state))
            segments.append(self._segment_dict(region.ptr, blocks))
        return segments

    def close(self) -> None:
        """Give every region back to the device (anything still live is freed first)."""
        if self._closed:
            return
        self._wait_for_deferred()
        for allocation in self.live_allocations():
            self._free_and_coalesce(self._take_back(allocation))
        for region in list(self.regions):
            self._deallocate_region(region)
        self._closed = True
