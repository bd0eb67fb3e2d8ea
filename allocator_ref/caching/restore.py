"""Put the allocator into a state it was in before we started watching.

Most real traces start mid-run: segments and live tensors already exist when
history recording begins.  The replay tool infers that starting state from
the snapshot and gives it here, one segment at a time.  The segment is really
allocated on the device (cudaMalloc, at the address the trace saw), its
blocks are laid out as given (allocated ones become live allocations, the
gaps free blocks), and every statistic is updated as if the allocator had
made those decisions itself, so the stats/snapshot invariant holds.
"""
from __future__ import annotations

from .block import Block
from .config import kSmallBuffer


def restore_segment(allocator, address: int, size: int, stream, live_blocks, small: bool = None,
                    pool_id: tuple = (0, 0)) -> dict:
    """Recreate one non-expandable segment.

    ``live_blocks`` is a list of ``(address, size, requested_size)`` for the blocks that
    were allocated at that moment; everything between them is free.  ``pool_id`` names the
    private pool (MemPool / CUDA graph) the segment belonged to, (0, 0) for the default pools.
    Returns ``{address: Allocation}`` for the live blocks.
    """
    if small is None:
        small = size == kSmallBuffer
    da = allocator.device_allocator               # the pools and stats are the DeviceCachingAllocator's
    pool = da.small_blocks if small else da.large_blocks
    if tuple(pool_id) != (0, 0):                   # a private pool's segment: its pool, held alive
        private = da.graph_pools.get(tuple(pool_id)) or da.create_or_incref_pool(tuple(pool_id))
        private.cudaMalloc_count += 1
        pool = private.small_blocks if small else private.large_blocks
    stat_types = pool.stat_types
    ptr = allocator.device.malloc(size)
    if ptr != address:
        allocator.device.free(ptr)
        raise RuntimeError(f"the device placed the restored segment at {ptr:#x}, not {address:#x}")
    da.total_allocated_memory += size
    stats = da.stats
    stats.increase("segment", stat_types, 1)
    stats.increase("reserved_bytes", stat_types, size)
    if size >= da.config.max_split_size:
        stats.oversize_segments.increase(1)

    # Cut the segment into blocks: live ones as given, free ones in the gaps.
    pieces, cursor = [], address
    for b_addr, b_size, requested in sorted(live_blocks):
        if b_addr < cursor or b_addr + b_size > address + size:
            raise ValueError(f"block {b_addr:#x}+{b_size} does not fit segment {address:#x}+{size}")
        if b_addr > cursor:
            pieces.append((cursor, b_addr - cursor, None))
        pieces.append((b_addr, b_size, requested))
        cursor = b_addr + b_size
    if cursor < address + size:
        pieces.append((cursor, address + size - cursor, None))

    blocks, prev = [], None
    for b_addr, b_size, requested in pieces:
        block = Block(b_addr, b_size, stream, stream.handle, pool)
        block.splice(prev, None)
        blocks.append((block, requested))
        prev = block

    split = len(blocks) > 1
    handed_out = {}
    for block, requested in blocks:
        if requested is None:                      # a free block waiting in the pool
            pool.insert_into_blocks(block)
            if split:
                stats.increase("inactive_split", stat_types, 1)
                stats.increase("inactive_split_bytes", stat_types, block.size)
            continue
        block.allocated = True
        block.requested_size = requested
        da.active_blocks[block.ptr] = block
        stats.on_alloc_found_block(stat_types, block.size, requested)
        if block.size >= da.config.max_split_size:
            da._oversize_blocks.add(block.ptr)           # so its free undoes exactly this count
            stats.oversize_allocations.increase(1)
        handed_out[block.ptr] = allocator.native_allocator.add_allocated_block(block)
    return handed_out
