"""A private pool's state, saved and put back: what ``torch.compile``'s CUDA graph trees rely on.

Mirrors ``BlockState``, ``SegmentState``, ``PrivatePoolState`` and ``RestoreResult`` of
``c10/cuda/CUDACachingAllocator.cpp`` (see its Note [Checkpointing PrivatePoolState]) and
``CheckpointDelta`` of ``NativeCachingAllocator::setCheckpointPoolState``.  The functions that
take and apply a checkpoint are ``DeviceCachingAllocator`` members, as in PyTorch
(``getCheckpointState``, ``setCheckpointPoolState``; device_caching_allocator.py, section
"checkpoints"), and NativeCachingAllocator turns the RestoreResult into a CheckpointDelta.

What a checkpoint holds: for every segment of the pool (its head block, ``prev`` is None), every
block's stream, size, address, whether it was allocated and its GC age.  Not held: requested
sizes, stacks, ``use_count`` and ``cudaMalloc_count`` ("they remain the same").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BlockState:
    """``BlockState``: one block as the checkpoint saw it (its events must have completed)."""

    stream: Any
    stream_uses: frozenset
    size: int
    ptr: int
    allocated: bool
    gc_count_base: int

    @classmethod
    def of(cls, block: Any) -> "BlockState":
        if block.event_count != 0:
            raise RuntimeError("Events should have synchronized when checkpointing block")
        return cls(block.stream, frozenset(block.stream_uses), block.size, block.ptr,
                   block.allocated, block.gc_count_base)


@dataclass(frozen=True)
class SegmentState:
    """``SegmentState``: a segment's blocks, head first (an expandable one ends with its unmapped rest)."""

    blocks: tuple
    is_small: bool

    @classmethod
    def of(cls, head: Any) -> "SegmentState":
        assert head.prev is None and head.pool is not None, "a segment state starts at a segment's head"
        blocks, block = [], head
        while block is not None:
            blocks.append(BlockState.of(block))
            block = block.next
        return cls(tuple(blocks), head.pool.is_small)


@dataclass(frozen=True)
class PrivatePoolState:
    """``PrivatePoolState``: the pool's id and the state of each of its segments."""

    owner_id: tuple
    segments: tuple


@dataclass
class CheckpointDelta:
    """``CheckpointDelta``: what ``set_checkpoint_pool_state`` changed for the program.

    ``ptrs_freed``: allocations that were live and are not in the checkpoint (their tensors are
    now stale: PyTorch strips their deleters).  ``allocations_created``: one new Allocation per
    block the checkpoint had allocated (CUDA graph trees wrap them in fresh storages).
    """

    ptrs_freed: list = field(default_factory=list)
    allocations_created: list = field(default_factory=list)


@dataclass
class RestoreResult:
    """``RestoreResult``: what ``DeviceCachingAllocator.set_checkpoint_pool_state`` did, in Blocks.

    ``allocations_freed``: pointers of blocks that were allocated and are not in the checkpoint;
    ``allocations_created``: the blocks the checkpoint has allocated.  NativeCachingAllocator
    turns it into a CheckpointDelta (its Allocations)."""

    allocations_freed: list = field(default_factory=list)
    allocations_created: list = field(default_factory=list)
