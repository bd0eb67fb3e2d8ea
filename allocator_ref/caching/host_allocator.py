"""Pinned host memory, cached: PyTorch 2.11's ``CachingHostAllocator`` in Python.

``tensor.pin_memory()`` and ``torch.empty(..., pin_memory=True)`` get their page-locked
bytes from this allocator (``CachingHostAllocatorImpl`` in
``aten/src/ATen/core/CachingHostAllocator.h``, specialised for CUDA in
``aten/src/ATen/cuda/CachingHostAllocator.cpp``).  What it does, and what this model keeps:

* every request is rounded up to a power of two (``c10::llvm::PowerOf2Ceil``) and the
  power of two indexes one free list per size; a block is never split (unlike the device
  allocator), so a 33 MiB request holds a 64 MiB block;
* ``record_event`` notes the streams that used a block (a ``non_blocking`` copy calls it);
  ``free`` records one event per stream, and the block returns to its free list only once
  every one of those events has completed (``process_events``, run at each ``allocate``);
* ``empty_cache`` gives every block on a free list back (``cudaFreeHost``); nothing else does;
* ``pinned_reserve_segment_size_mb`` pins one segment of that size at the first slow-path
  allocation and carves blocks out of it (each rounded to 4 KiB, *after* the power-of-two
  rounding) until it is full; its blocks are never given back, not even by ``empty_cache``
  (``free_block`` skips them), and the bump pointer never moves back;
* ``host_memory_stats()`` returns the keys ``torch.cuda.host_memory_stats()`` returns in 2.11.

Not modelled: the background thread (``pinned_use_background_threads`` only moves the
event polling of ``allocate`` onto a helper thread; here events are polled at every
``allocate``), the page-touching threads of ``pinned_num_register_threads``, and the
private pools of CUDA graph capture.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from .config import AllocatorConfig
from .stats import DurationStat, Stat

MiB = 1 << 20
MAX_SIZE_INDEX = 64                # one free list per power of two (CachingHostAllocator.h)
RESERVE_PAGE = 4096                # PinnedReserveSegment::allocate rounds each slice to 4 KiB
HOST_STAT_NAMES = ("active_bytes", "active_requests", "allocated_bytes", "allocations")
HOST_DURATION_NAMES = ("host_alloc_time", "host_free_time")


def power_of_two_ceil(nbytes: int) -> int:
    """``c10::llvm::PowerOf2Ceil``: the smallest power of two >= ``nbytes``."""
    return 1 << (nbytes - 1).bit_length()


def size_index(nbytes: int) -> int:
    """``size_index`` (``Log2_64_Ceil``): which free list a block of this size lives on."""
    return (nbytes - 1).bit_length()


@dataclass(eq=False)
class HostBlock:
    """``HostBlock<S>``: one pinned block.  ``host`` is its bytes; ``size`` the rounded size."""

    size: int
    host: memoryview
    requested_size: int = 0
    allocated: bool = True
    event_count: int = 0
    streams: set = field(default_factory=set)      # streams recorded since the last free
    from_reserve: bool = False
    _buffer: object = field(default=None, repr=False)   # the device's HostBuffer (None for a reserve slice)


class PinnedReserveSegment:
    """``PinnedReserveSegment``: one pinned segment handed out front to back, never given back."""

    def __init__(self, buffer) -> None:
        self.buffer = buffer
        self.used = 0

    @property
    def size(self) -> int:
        return self.buffer.nbytes

    def allocate(self, nbytes: int) -> Optional[memoryview]:
        """The next ``nbytes`` (rounded to 4 KiB), or None when the segment is full."""
        rounded = -(-nbytes // RESERVE_PAGE) * RESERVE_PAGE
        if self.used + rounded > self.size:
            return None
        view = self.buffer.host[self.used:self.used + nbytes]
        self.used += rounded
        return view


class CachingHostAllocator:
    """PyTorch's pinned-memory allocator over a device's ``host_alloc`` (cudaHostAlloc).

    ``config`` is a ``PYTORCH_CUDA_ALLOC_CONF`` string (or an ``AllocatorConfig``); the keys
    it reads are ``pinned_reserve_segment_size_mb`` and ``pinned_use_cuda_host_register``.
    """

    def __init__(self, device, config: "str | AllocatorConfig" = "") -> None:
        if isinstance(config, str):
            config = AllocatorConfig.parse(config)
        elif not isinstance(config, AllocatorConfig):
            raise TypeError(f"config must be a string like 'pinned_reserve_segment_size_mb:1024' "
                            f"or an AllocatorConfig, got {type(config).__name__}")
        self.device = device
        self.config = config
        self._blocks: set = set()                               # blocks_
        self._free_lists = [[] for _ in range(MAX_SIZE_INDEX)]  # free_list_, one per power of two
        self._events: deque = deque()                           # events_: (event, block), newest first
        self._reserve: Optional[PinnedReserveSegment] = None
        self._reserve_tried = False
        self._stats = {name: Stat() for name in HOST_STAT_NAMES}
        self._durations = {name: DurationStat() for name in HOST_DURATION_NAMES}

    # ---- the four public methods (Note [HostAllocator design]) ----------------------------
    def allocate(self, nbytes: int) -> Optional[HostBlock]:
        """``CachingHostAllocatorImpl::allocate``: a cached block of the rounded size, or a new one."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise ValueError(f"allocate needs a byte count >= 0, got {nbytes!r}")
        if nbytes == 0:
            return None                                  # PyTorch returns {nullptr, nullptr}
        self._process_events()
        size = power_of_two_ceil(nbytes)
        block = self._get_free_block(size)
        if block is None:
            block = self._new_block(size)
        block.requested_size = nbytes
        return block

    def free(self, block: Optional[HostBlock]) -> None:
        """``CachingHostAllocatorImpl::free``: cached at once, or after the events of its streams."""
        if block is None:
            return
        self._check_live(block, "free")
        block.allocated = False
        if not block.streams:
            self._make_reusable(block)
            return
        for stream in block.streams:                     # record_stream: one event per stream
            event = self.device.create_event(timing=False)
            event.record(stream)
            self._events.appendleft((event, block))
        block.event_count += len(block.streams)
        block.streams = set()

    def record_event(self, block: HostBlock, stream) -> bool:
        """``record_event``: ``block`` was used on ``stream`` (a ``cudaMemcpyAsync`` from or to it).

        False when ``block`` is not one of this allocator's blocks, as PyTorch answers for a
        tensor that is not pinned memory from this allocator.
        """
        if block not in self._blocks:
            return False
        self._check_live(block, "record_event")
        block.streams.add(stream)
        return True

    def empty_cache(self) -> None:
        """``empty_cache``: collect finished events, then give every free block back."""
        self._process_events()
        for free_list in self._free_lists:
            for block in free_list:
                self._blocks.discard(block)
                self._stats["allocations"].decrease(1)
                self._stats["allocated_bytes"].decrease(block.size)
                self._free_block(block)
            free_list.clear()

    # ---- statistics --------------------------------------------------------------------
    def host_memory_stats(self) -> dict:
        """``torch.cuda.host_memory_stats()``: the flat, sorted dict of PyTorch 2.11's keys.

        ``allocations``/``allocated_bytes``: blocks the allocator owns (in use + cached);
        ``active_requests``/``active_bytes``: blocks handed out and not yet reusable;
        ``num_host_alloc``/``num_host_free`` equal ``allocations.allocated``/``.freed``
        (``getStats``), so a block carved from the reserve segment counts as an alloc too.
        The active counters follow the documented meaning (they drop when a block becomes
        reusable); 2.11's code misses that drop on a free with no recorded stream.
        """
        nested = {name: stat.as_dict() for name, stat in self._stats.items()}
        nested.update({name: stat.as_dict() for name, stat in self._durations.items()})
        nested["num_host_alloc"] = self._stats["allocations"].allocated
        nested["num_host_free"] = self._stats["allocations"].freed
        flat = {}
        for key, value in nested.items():
            if isinstance(value, dict):
                flat.update({f"{key}.{inner}": number for inner, number in value.items()})
            else:
                flat[key] = value
        return dict(sorted(flat.items()))

    def reset_peak_stats(self) -> None:
        """``torch.cuda.reset_peak_host_memory_stats``."""
        for stat in self._stats.values():
            stat.reset_peak()

    @property
    def reserve_segment_used(self) -> int:
        """Bytes of the ``pinned_reserve_segment_size_mb`` segment handed out so far (0 without one)."""
        return self._reserve.used if self._reserve is not None else 0

    # ---- the free lists and the event queue ------------------------------------------------
    def _get_free_block(self, size: int) -> Optional[HostBlock]:
        free_list = self._free_lists[size_index(size)]
        if not free_list:
            return None
        block = free_list.pop()                          # the most recently cached block first
        block.allocated = True
        self._stats["active_requests"].increase(1)
        self._stats["active_bytes"].increase(size)
        return block

    def _make_reusable(self, block: HostBlock) -> None:
        self._free_lists[size_index(block.size)].append(block)
        self._stats["active_requests"].decrease(1)
        self._stats["active_bytes"].decrease(block.size)

    def _process_events(self) -> None:
        """``process_events``: oldest event first, stop at the first one not yet complete."""
        while self._events:
            event, block = self._events[-1]
            if not event.query():
                return
            self._events.pop()
            block.event_count -= 1
            if block.event_count == 0:
                self._make_reusable(block)

    def _check_live(self, block, call: str) -> None:
        if not isinstance(block, HostBlock) or block not in self._blocks or not block.allocated:
            raise ValueError(f"{call}: not a block this allocator handed out, or already freed; "
                             "free each block once, with the allocator that allocated it")

    # ---- pinning and unpinning (the CUDA specialisation) -------------------------------------
    def _new_block(self, size: int) -> HostBlock:
        block = self._allocate_host_memory(size)
        self._blocks.add(block)
        for name, amount in (("allocations", 1), ("allocated_bytes", size),
                             ("active_requests", 1), ("active_bytes", size)):
            self._stats[name].increase(amount)
        return block

    def _allocate_host_memory(self, size: int) -> HostBlock:
        """``allocate_host_memory``: a slice of the reserve segment if one fits, else pin anew."""
        reserve = self._reserve_segment()
        if reserve is not None:
            view = reserve.allocate(size)
            if view is not None:
                return HostBlock(size, view, from_reserve=True)
        buffer = self._pin(size)
        return HostBlock(size, buffer.host, _buffer=buffer)

    def _reserve_segment(self) -> Optional[PinnedReserveSegment]:
        """``get_reserve_segment``: pinned once, at the first slow-path allocation."""
        if not self._reserve_tried:
            self._reserve_tried = True
            mb = self.config.pinned_reserve_segment_size_mb
            if mb > 0:
                self._reserve = PinnedReserveSegment(self._pin(mb * MiB))
        return self._reserve

    def _pin(self, size: int):
        """``allocate_host_memory_slowpath``: cudaHostAlloc, or malloc + cudaHostRegister."""
        start = self.device.now_us()
        if self.config.pinned_use_cuda_host_register:
            buffer = self.device.host_register(bytearray(size))   # the device keeps the bytearray
        else:
            buffer = self.device.host_alloc(size, mapped=False)   # cudaHostAllocDefault
        self._durations["host_alloc_time"].increase(int(self.device.now_us() - start))
        return buffer

    def _free_block(self, block: HostBlock) -> None:
        """``free_block``: cudaFreeHost (or cudaHostUnregister); a reserve slice is kept."""
        if block.from_reserve:
            return
        start = self.device.now_us()
        self._unpin(block._buffer)
        self._durations["host_free_time"].increase(int(self.device.now_us() - start))

    def _unpin(self, buffer) -> None:
        if buffer.registered:
            self.device.host_unregister(buffer)
        else:
            self.device.host_free(buffer)

    def close(self) -> None:
        """Unpin everything, in use or not (the end of a notebook or a test)."""
        for block in list(self._blocks):
            if not block.from_reserve:
                self._unpin(block._buffer)
        if self._reserve is not None:
            self._unpin(self._reserve.buffer)
        self._blocks.clear()
        self._free_lists = [[] for _ in range(MAX_SIZE_INDEX)]
        self._events.clear()
        self._reserve = None
