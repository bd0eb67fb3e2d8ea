"""``NativeCachingAllocator``: the thin layer between the user's pointers and ``DeviceCachingAllocator``.

In ``CUDACachingAllocator.cpp`` this class holds one ``DeviceCachingAllocator`` per device and the
map of every pointer it handed out (``allocated_blocks``): ``malloc`` asks the device allocator
for a Block and remembers it under its pointer, ``free`` looks the pointer up and hands the Block
back.  It also checks arguments, and it is where caching can be switched off
(``forceUncachedAllocator``: ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, or ``enable(False)``): then
memory comes from cudaMalloc directly and never reaches the device allocator.

Here the map holds an ``Allocation`` (what the user gets back) per pointer; there is one device
per allocator object, so ``device_allocator`` is one ``DeviceCachingAllocator``, not a list.
The name is the file: the class PyTorch keeps between ``DeviceCachingAllocator`` and the Python API.
"""
from __future__ import annotations

from typing import Any, Optional

from ..allocation import Allocation
from ..front_door import check_request_size, live_allocation, resolve_stream
from .checkpoint import CheckpointDelta, PrivatePoolState
from .config import ONE_EXABYTE
from .device_caching_allocator import DeviceCachingAllocator
from .oom import OutOfMemoryError


class NativeCachingAllocator:
    """PyTorch's ``NativeCachingAllocator`` for one device: pointers in, Blocks to the device allocator.

    ``owner`` is the object each Allocation names as its allocator (the ``CachingAllocator`` a user
    holds: freeing through another one is refused).
    """

    force_uncached: bool = False      # forceUncachedAllocator(): PYTORCH_NO_CUDA_MEMORY_CACHING, read once

    def __init__(self, device: Any, device_allocator: DeviceCachingAllocator, owner: Any) -> None:
        self.device = device
        self.device_allocator = device_allocator
        self.owner = owner
        self.allocated_blocks: dict[int, Allocation] = {}    # ptr -> Allocation handed out
        self.enabled = True                                  # enable() / isEnabled()

    # -------------------------------------------------------------- allocate and free
    def malloc(self, nbytes: int, stream: Any = None) -> Allocation:
        """``allocate`` + ``malloc``: check the arguments, then a Block from the device allocator
        (or cudaMalloc directly when caching is off), remembered under its pointer."""
        check_request_size(nbytes)          # the front door every allocator shares (front_door.py)
        stream = resolve_stream(self.device, stream, "malloc")
        if nbytes == 0:      # a null DataPtr: no block, no stats, no event
            return Allocation(ptr=0, size=0, requested_size=0, stream=stream, allocator=self.owner)
        if nbytes >= ONE_EXABYTE:
            raise OutOfMemoryError(self.device_allocator.exabyte_message)
        if not self.enabled or self.force_uncached:
            return self.uncached_allocate(nbytes, stream)
        block = self.device_allocator.malloc(nbytes, stream)
        # add_allocated_block, written out: this is the warm path, one Python call fewer.
        allocation = Allocation(block.ptr, block.size, nbytes, stream, self.owner, block)
        self.allocated_blocks[block.ptr] = allocation
        return allocation

    def add_allocated_block(self, block: Any) -> Allocation:
        """``add_allocated_block``: remember a Block handed out other than by malloc (a checkpoint
        restored, a segment rebuilt from a snapshot) and return its Allocation."""
        allocation = Allocation(block.ptr, block.size, block.requested_size, block.stream, self.owner, block)
        self.allocated_blocks[block.ptr] = allocation
        return allocation

    def free(self, allocation: "Allocation | int") -> None:
        """``free``: find the Block behind the pointer, forget the pointer, hand the Block back."""
        allocation = self.get_allocated_block(allocation, "free")
        if allocation is None:                   # free(nullptr): nothing to do
            return
        block = allocation._block
        if block is None:                        # came from cudaMalloc directly (caching switched off)
            self.uncached_delete(allocation)
            return
        allocation.freed = True
        del self.allocated_blocks[block.ptr]
        self.device_allocator.free(block)

    def record_stream(self, allocation: "Allocation | int", stream: Any) -> None:
        """``recordStream``: null and uncached pointers are skipped; the rest go to the device allocator."""
        allocation = self.get_allocated_block(allocation, "record_stream")
        stream = resolve_stream(self.device, stream, "record_stream")
        if allocation is None or allocation._block is None:   # null or uncached: recordStream skips it
            return
        self.device_allocator.record_stream(allocation._block, stream)

    def raw_alloc(self, nbytes: int, stream: Any = None) -> int:
        """``raw_alloc`` / ``raw_alloc_with_stream``: a bare device pointer (0 for 0 bytes)."""
        return self.malloc(nbytes, stream).ptr

    def raw_delete(self, ptr: int) -> None:
        """``raw_delete``: give back a pointer from ``raw_alloc``.

        PyTorch picks cudaFree or the cache by the mode *now*, so switching modes between
        raw_alloc and raw_delete cudaFrees a cached block (or fails to find an uncached one).
        Here the pointer says which it is: each goes back where it came from.
        """
        self.free(ptr)

    # ----------------------------------------------------------------- lookups
    def get_allocated_block(self, allocation: Any, what: str) -> Optional[Allocation]:
        """``get_allocated_block``: the live Allocation behind ``allocation`` (an Allocation or a
        pointer), None for a null pointer, or PyTorch's "invalid device pointer" error.

        The checks are the front door every allocator shares (front_door.live_allocation)."""
        if type(allocation) is Allocation and allocation.ptr and \
                self.allocated_blocks.get(allocation.ptr) is allocation:
            return allocation                    # the warm path: a live allocation of ours, one lookup
        return live_allocation(self.allocated_blocks, self.owner, allocation, what)

    def check_stream(self, stream: Any) -> Any:
        """The current stream for None; a stream of another device or a destroyed one is refused
        (``getCurrentCUDAStream`` and the stream checks of ``allocate`` / ``recordStream``)."""
        return resolve_stream(self.device, stream, "malloc")

    # ---------------------------------------------------------- memory fraction
    def set_memory_fraction(self, fraction: float) -> None:
        """``setMemoryFraction``: the argument checks, then the device allocator's ``setMemoryFraction``.

        The TypeError is torch.cuda's (``set_per_process_memory_fraction``), the range check PyTorch's."""
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.device_allocator.set_memory_fraction(fraction)

    # ------------------------------------------------------------- checkpoints
    def set_checkpoint_pool_state(self, state: PrivatePoolState) -> CheckpointDelta:
        """``setCheckpointPoolState``: the device allocator restores the pool; here the pointer map
        follows (freed pointers forgotten, one new Allocation per block the checkpoint holds)."""
        if not isinstance(state, PrivatePoolState):
            raise TypeError(f"Expected PrivatePoolState (from get_checkpoint_state), got {type(state).__name__}")
        rr = self.device_allocator.set_checkpoint_pool_state(state)
        delta = CheckpointDelta()
        for ptr in rr.allocations_freed:
            self.allocated_blocks.pop(ptr).freed = True
            delta.ptrs_freed.append(ptr)
        for block in rr.allocations_created:
            delta.allocations_created.append(self.add_allocated_block(block))
        return delta

    # ------------------------------------------------------- caching switched off
    # PYTORCH_NO_CUDA_MEMORY_CACHING=1 (forceUncachedAllocator) or caching_allocator_enable(False).
    def enable(self, value: bool) -> None:
        """``enable``: switch the cache on or off."""
        if not isinstance(value, bool):
            raise TypeError(f"caching_allocator_enable expects True or False, got {value!r}")
        self.enabled = value

    def is_enabled(self) -> bool:
        """``isEnabled``, with ``forceUncachedAllocator()``: False when requests bypass the cache."""
        return self.enabled and not self.force_uncached

    def uncached_allocate(self, nbytes: int, stream: Any) -> Allocation:
        """``allocate``'s uncached branch: cudaMalloc exactly ``nbytes``; no stats move.

        Out of memory here is cudaMalloc's own error (``C10_CUDA_CHECK``), not the caching
        allocator's OutOfMemoryError: there is no cache to empty and retry.
        """
        ptr = self.device.malloc(nbytes)
        allocation = Allocation(ptr=ptr, size=nbytes, requested_size=nbytes, stream=stream,
                                allocator=self.owner, _block=None)
        self.allocated_blocks[ptr] = allocation
        return allocation

    def uncached_delete(self, allocation: Allocation) -> Optional[bool]:
        """``uncached_delete``: cudaFree at once (no stream ordering: the caller synchronizes)."""
        self.device.free(allocation.ptr)
        del self.allocated_blocks[allocation.ptr]
        allocation.freed = True
        return True
