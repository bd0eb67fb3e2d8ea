"""The "no cache" baseline: every malloc is a cudaMalloc, every free a cudaFree.

This is what ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` or CuPy without a pool
does.  It wastes nothing (one segment per request, rounded only to the
512 B cudaMalloc alignment) and returns memory at once, but every free pays
``cudaFree``'s implicit device-wide synchronisation: the host waits until
all queued kernels on all streams have finished.  Chapter 1 measures that
wait on the device clock (``device.counters.implicit_syncs``).

Stream safety: ``cudaFree`` already waits for the whole device, so memory
freed here can never be overwritten by a later kernel while an old one still
reads it.  ``record_stream`` is still honoured the PyTorch way, so the
policies behave alike: the free is deferred until one CUDA event per using
stream has completed (checked at every malloc, on :meth:`synchronize` and
:meth:`empty_cache`).
"""
from __future__ import annotations

from typing import Any, Optional

from allocator_ref.allocation import Allocation
from allocator_ref.device.errors import CudaOutOfMemoryError

from allocator_ref.caching.config import ONE_EXABYTE

from allocator_ref.front_door import check_request_size

from .common import (BlockRecord, PolicyAllocator, format_size,
                     OutOfMemoryError, parse_config, round_up, stat_keys)


class DirectAllocator(PolicyAllocator):
    """cudaMalloc / cudaFree on every request (the baseline with no cache)."""

    ROUND = 512   # cudaMalloc's guaranteed alignment; nothing else is rounded
    STAT_KEYS = stat_keys(
        ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes",
         "active_bytes", "requested_bytes"),
        counters=("num_device_alloc", "num_device_free", "num_ooms", "num_sync_all_streams"))

    def __init__(self, device: Any, config: Any = None) -> None:
        super().__init__(device)
        self.options = parse_config(config, {})     # no options: the baseline has no knobs

    # ------------------------------------------------------------------ malloc
    def malloc(self, nbytes: int, stream: Optional[Any] = None) -> Allocation:
        self._check_open("malloc")
        size = check_request_size(nbytes)
        stream = self._resolve_stream(stream, "malloc")
        if size == 0:
            return self._null_allocation(stream)
        if size >= ONE_EXABYTE:                     # PyTorch's guard, before any device call
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate more than 1EB memory.")
        self._process_events()                      # PyTorch does this first in every malloc
        rounded = round_up(size, self.ROUND)
        ptr = self._cuda_malloc(rounded, stream)
        segment = BlockRecord(ptr=ptr, size=rounded, requested_size=size, stream=stream)
        return self._hand_out(segment, stream)

    def _cuda_malloc(self, rounded: int, stream: Any) -> int:
        """cudaMalloc; on failure wait for the deferred frees and try once more, then OOM."""
        try:
            ptr = self.device.malloc(rounded)
        except CudaOutOfMemoryError:
            if not self._wait_for_deferred():
                self._raise_oom(rounded, stream)
            try:
                ptr = self.device.malloc(rounded)
            except CudaOutOfMemoryError:
                self._raise_oom(rounded, stream)
        self.stats.num_device_alloc += 1
        self._stat_increase(("segment",), 1)
        self._stat_increase(("reserved_bytes",), rounded)
        self._emit("segment_alloc", ptr, rounded, stream)
        return ptr

    def _raise_oom(self, rounded: int, stream: Any) -> None:
        """PyTorch's native message (the end of ``DeviceCachingAllocator::malloc``), with this allocator's figures."""
        self._trace_oom(rounded, stream)
        free, total = self.device.mem_get_info()
        allocated = self.memory_allocated()
        reserved = self.memory_reserved()
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {format_size(rounded)}. GPU {self.device.info.index} "
            f"has a total capacity of {format_size(total)} of which {format_size(free)} is free. "
            f"Of the allocated memory {format_size(allocated)} is allocated by the DirectAllocator, "
            f"and {format_size(reserved - allocated)} is reserved by it but unallocated "
            f"(frees waiting for record_stream events).")

    # ------------------------------------------------------------------ free
    def _release(self, segment: BlockRecord) -> None:
        """free_completed, then cudaFree (which waits for the whole device) and segment_free."""
        self._complete_free(segment)
        self.device.free(segment.ptr)
        self.stats.num_device_free += 1
        self._stat_decrease(("segment",), 1)
        self._stat_decrease(("reserved_bytes",), segment.size)
        self._emit("segment_free", segment.ptr, segment.size, segment.stream)

    # ------------------------------------------------------------------ streams and events
    def _free_after_events(self, record) -> None:
        """The base's hook: PolicyAllocator.free calls it once no other stream uses the memory."""
        self._release(record)

    def empty_cache(self) -> None:
        """Nothing is cached; only the frees waiting for events are completed."""
        self._check_open("empty_cache")
        self._wait_for_deferred()

    # ------------------------------------------------------------------ snapshot and teardown
    def _segments(self) -> list[dict]:
        segments = []
        for allocation in self._live.values():
            b = allocation._block
            segments.append(self._segment_dict(
                b.ptr, [self._block_dict(b.ptr, b.size, b.requested_size, "active_allocated")], b.stream))
        for b in self._guard.items():
            segments.append(self._segment_dict(
                b.ptr, [self._block_dict(b.ptr, b.size, b.requested_size, "active_pending_free")], b.stream))
        return segments

    def close(self) -> None:
        """Give everything back to the device: deferred frees, then anything still live."""
        if self._closed:
            return
        self._wait_for_deferred()
        for allocation in self.live_allocations():
            self._release(self._take_back(allocation))
        self._closed = True
