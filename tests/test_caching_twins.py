"""Every ``DeviceCachingAllocator`` function the course names is called where PyTorch calls it.

``caching/allocator.py`` promises a learner with ``c10/cuda/CUDACachingAllocator.cpp`` open beside
it that each PyTorch function has a twin of the same name.  A twin that exists but is not called
(its rule inlined somewhere else) breaks that promise silently: a learner who edits it sees
nothing change.  So each twin below is wrapped on a live allocator, workloads that reach every
rung of PyTorch's ``malloc``/``free``/``emptyCache`` are run, and the test checks that the twin
was called *by the function PyTorch calls it from* (the caller's name, read from the frame).

The callers are read from CUDACachingAllocator.cpp (``DeviceCachingAllocator::malloc`` calls
``process_events``, ``round_size``, ``get_pool``, ``get_free_block``, ...; ``release_blocks``
calls ``unmap_block`` and ``release_expandable_segment``; ``Block::splice`` is used by
``map_block`` and ``unmap_block``).
"""
from __future__ import annotations

import glob
import re
import sys

import pytest

import allocator_ref as ar
from allocator_ref.caching import CachingAllocator
from allocator_ref.caching.block import Block, BlockPool
from allocator_ref.device import SimDevice

MiB = 1 << 20

# twin -> the DeviceCachingAllocator functions PyTorch calls it from (any one of them is enough
# for the test of that pair; every pair listed must be seen).
TWINS = {
    "process_events": {"malloc"},
    "round_size": {"malloc"},
    "get_pool": {"malloc"},
    "get_allocation_size": {"malloc"},
    "get_free_block": {"malloc"},
    "trigger_free_memory_callbacks": {"malloc"},
    "garbage_collect_cached_blocks": {"malloc"},
    "alloc_block": {"malloc"},
    "try_mempool_fallback": {"malloc"},
    "release_available_cached_blocks": {"malloc"},
    "release_cached_blocks": {"malloc", "empty_cache"},
    "should_split": {"malloc"},
    "alloc_found_block": {"malloc"},
    "insert_events": {"free"},
    "free_block": {"free", "process_events", "synchronize_and_free_events"},
    "try_merge_blocks": {"free_block", "map_block", "unmap_block"},
    "synchronize_and_free_events": {"release_cached_blocks"},
    "release_blocks": {"release_cached_blocks"},
    "release_block": {"release_blocks", "release_available_cached_blocks", "garbage_collect_cached_blocks"},
    "try_allocate_expandable_block": {"alloc_block"},
    "find_expandable_block": {"try_allocate_expandable_block"},
    "map_block": {"try_allocate_expandable_block"},
    "unmap_block": {"release_blocks"},
    "release_expandable_segment": {"release_blocks"},
    # the capture rules (an open use_mem_pool takes the same branches) and checkpoints
    "remove_cudagraph_stream_uses": {"insert_events_deferred_until_no_capture"},
    "insert_events_deferred_until_no_capture": {"process_events", "get_checkpoint_state"},
    "free_blocks_allocated_to_pool": {"set_checkpoint_pool_state"},
    "set_segment_state_to_checkpoint": {"set_checkpoint_pool_state"},
    # history and the snapshot (record_trace's callers: every function that writes a TraceEntry;
    # segments() is DeviceCachingAllocator::snapshot, snapshot() the torch.cuda dict above it)
    "record_trace": {"malloc", "alloc_found_block", "alloc_block", "free", "free_block", "release_block",
                     "map_block", "unmap_block", "segments"},
    "maybe_gather_context": {"malloc", "free", "empty_cache", "get_checkpoint_state", "set_checkpoint_pool_state"},
    "get_all_blocks": {"segments"},
    # the stats and the memory fraction: torch.cuda's functions reach DeviceCachingAllocator's
    "get_stats": {"memory_stats"},
    "reset_accumulated_stats": {"reset_accumulated_memory_stats"},
    "reset_peak_stats": {"reset_peak_memory_stats"},
    "set_memory_fraction": {"set_per_process_memory_fraction"},
    "get_memory_fraction": {"get_per_process_memory_fraction"},
    "get_private_pool_head_blocks": {"get_checkpoint_state", "free_blocks_allocated_to_pool"},
}
# Block and BlockPool members PyTorch calls by name.
BLOCK_TWINS = {
    (Block, "splice"): {"alloc_found_block", "map_block", "unmap_block"},
    (Block, "is_split"): {"free_block", "release_blocks", "release_block", "garbage_collect_cached_blocks"},
    (BlockPool, "insert_into_blocks"): {"free_block", "alloc_found_block", "map_block", "unmap_block"},
    (BlockPool, "erase"): {"get_free_block"},          # pool.blocks.erase(it), at lower_bound's position
}
# What a user calls: the entry points, not twins called from inside the allocator.
PUBLIC = {"malloc", "free", "empty_cache", "close", "record_stream", "snapshot", "memory_stats",
          "memory_summary", "memory_allocated", "memory_reserved", "max_memory_allocated",
          "max_memory_reserved", "raw_alloc", "record_memory_history", "set_per_process_memory_fraction",
          "use_mem_pool", "get_checkpoint_state", "set_checkpoint_pool_state"}


def _caller() -> str:
    return sys._getframe(2).f_code.co_name


def _watch(allocator: CachingAllocator, seen: set) -> None:
    """Replace each twin on this instance by a wrapper that notes (twin, caller) and calls it."""
    for name in TWINS:
        original = getattr(allocator, name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            seen.add((_name, _caller()))
            return _original(*args, **kwargs)
        setattr(allocator, name, wrapper)


def _workloads(seen: set) -> None:
    def new(conf: str = "", profile: str = "tiny-1gb") -> CachingAllocator:
        a = CachingAllocator(SimDevice(profile), conf)
        _watch(a, seen)
        return a

    # split, merge, free callbacks on a miss (history on: each step writes its TraceEntry)
    a = new()
    a.record_memory_history()
    a.free_memory_callbacks.append(lambda: False)
    x, y, z = a.malloc(1000), a.malloc(3000), a.malloc(5 * MiB)
    a.free(y), a.free(x), a.free(z)
    # another stream's use: free inserts events, the next malloc processes them
    side = a.device.create_stream()
    x = a.malloc(1000)
    a.device.sleep(side, 1000)
    a.record_stream(x, side)
    a.free(x)
    a.device.synchronize()
    a.free(a.malloc(1000))
    x = a.malloc(1000)                    # empty_cache waits for the events still pending
    a.device.sleep(side, 1000)
    a.record_stream(x, side)
    a.free(x)
    a.empty_cache()
    a.snapshot()
    a.memory_stats()
    a.reset_peak_memory_stats(), a.reset_accumulated_memory_stats()
    a.close()

    # out of memory, with history on: malloc writes the oom entry itself
    a = new()
    a.record_memory_history()
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(2 << 30)
    a.close()

    # max_split_size: the ladder frees oversize blocks, then empties the cache, on a miss
    a = new("max_split_size_mb:100")
    big = [a.malloc(300 * MiB) for _ in range(3)]
    for b in big:
        a.free(b)
    a.free(a.malloc(500 * MiB))
    small = [a.malloc(300 * MiB), a.malloc(200 * MiB)]
    a.free(small[1])
    a.free(a.malloc(600 * MiB))
    a.free(small[0])
    a.close()

    # garbage collection under a memory fraction
    a = new("garbage_collection_threshold:0.5")
    a.set_per_process_memory_fraction(0.5)
    assert a.get_per_process_memory_fraction() == 0.5
    for size in (100, 200, 150):
        a.free(a.malloc(size * MiB))
    a.free(a.malloc(300 * MiB))
    a.close()

    # expandable segments: map pages, unmap them on empty_cache, give the reservation back
    a = new("expandable_segments:True")
    a.record_memory_history()
    x, y, z = a.malloc(10 * MiB), a.malloc(35 * MiB), a.malloc(10 * MiB)
    a.free(y)          # [10, 45) MiB free: unmap_block keeps the partial pages either side
    a.empty_cache()
    a.free(x), a.free(z)
    a.empty_cache()
    a.close()

    # a MemPool with use_on_oom serves a default-pool request that would not fit
    a = new()
    pool = ar.MemPool(a, use_on_oom=True)
    with a.use_mem_pool(pool):
        held = a.malloc(40 * MiB)
    a.free(held)
    a.set_per_process_memory_fraction(80 / 1024)
    keep = a.malloc(40 * MiB)
    fallback = a.malloc(30 * MiB)
    a.free(fallback), a.free(keep)
    del pool
    a.close()

    # a cross-stream free under an open MemPool is deferred; the next malloc outside processes it
    a = new()
    a.record_memory_history()
    pool = ar.MemPool(a)
    side = a.device.create_stream()
    with a.use_mem_pool(pool):
        x = a.malloc(4 * MiB)
        a.record_stream(x, side)
        a.free(x)
    a.free(a.malloc(1000))
    # a checkpoint of a graph pool, taken and put back (CUDA graph trees)
    g, s = ar.CUDAGraph(a), a.device.create_stream()
    with ar.graph(g, stream=s) as cs:
        out = a.malloc(2 * MiB, cs)
    state = a.get_checkpoint_state(g.pool())
    a.free(out)
    delta = a.set_checkpoint_pool_state(state)
    a.free(delta.allocations_created[0])
    g.reset()
    del pool
    a.close()


@pytest.fixture(scope="module")
def calls():
    seen: set = set()
    originals = {key: getattr(*key) for key in BLOCK_TWINS}

    def watch_class(cls, name):
        original = originals[(cls, name)]

        def wrapper(*args, **kwargs):
            seen.add((f"{cls.__name__}.{name}", _caller()))
            return original(*args, **kwargs)
        return wrapper

    try:
        for cls, name in BLOCK_TWINS:
            setattr(cls, name, watch_class(cls, name))
        _workloads(seen)
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
    return seen


@pytest.mark.parametrize("twin,caller", sorted((t, c) for t, callers in TWINS.items() for c in callers))
def test_twin_called_from_pytorchs_caller(calls, twin, caller):
    callers = sorted(c for t, c in calls if t == twin)
    assert (twin, caller) in calls, (
        f"{twin} is never called from {caller} (PyTorch's caller); it was called from {callers or 'nowhere'}")


@pytest.mark.parametrize("cls,name", sorted(BLOCK_TWINS, key=lambda k: k[1]), ids=lambda v: getattr(v, "__name__", v))
def test_block_twin_called_from_pytorchs_callers(calls, cls, name):
    qual = f"{cls.__name__}.{name}"
    missing = sorted(c for c in BLOCK_TWINS[(cls, name)] if (qual, c) not in calls)
    assert not missing, f"{qual} is never called from {missing}"


def test_twins_are_never_called_from_a_helper_pytorch_does_not_have(calls):
    """A twin called from a private helper (``_malloc``, ``_free``) sits one call away from its mirror."""
    off_path = sorted((t, c) for t, c in calls if c.startswith("_") and not c.startswith("__"))
    assert not off_path, f"twins called from helpers PyTorch does not have: {off_path}"


def test_every_function_the_course_names_has_a_checked_twin():
    """Each allocator method a chapter or lab names in backticks is a user entry point or in TWINS."""
    named = set()
    for path in glob.glob("chapters/*.md") + glob.glob("labs/source/*.md"):
        with open(path, encoding="utf-8") as f:
            named |= set(re.findall(r"`([a-z_]+)(?:\(.*?\))?`", f.read()))
    methods = {n for n in named if callable(getattr(CachingAllocator, n, None)) and not n.startswith("_")}
    unchecked = sorted(methods - set(TWINS) - PUBLIC)
    assert not unchecked, f"the course names {unchecked}: add each to TWINS with PyTorch's caller"


def test_editing_get_pool_changes_where_malloc_puts_a_request():
    """A learner who edits get_pool sees the change: malloc asks get_pool, it does not inline it."""
    a = CachingAllocator(SimDevice("tiny-1gb"))
    a.get_pool = lambda size, stream=None: a.large_blocks       # every request to the large pool
    x = a.malloc(1000)
    assert x._block.pool is a.large_blocks
    a.free(x)
    assert len(a.large_blocks) == 1 and len(a.small_blocks) == 0
    a.close()


def test_block_key_is_the_pool_order():
    """BlockPool orders by Block.key() (``BlockComparatorSize``): changing key() changes the order."""
    pool = BlockPool(is_small=False)
    blocks = [Block(ptr, size, None, 0, pool) for ptr, size in ((0x3000, 4096), (0x1000, 8192), (0x2000, 4096))]
    for b in blocks:
        pool.insert_into_blocks(b)
    assert [b.ptr for b in pool] == [0x2000, 0x3000, 0x1000]     # (stream, size, address)
    assert list(pool).index(blocks[1]) == 2


def test_one_class_holds_every_device_caching_allocator_function():
    """No mixin: CachingAllocator inherits nothing, and no caching/ module defines a *Mixin."""
    import allocator_ref.caching as caching
    import pkgutil, importlib
    assert CachingAllocator.__mro__ == (CachingAllocator, object)
    mixins = []
    for info in pkgutil.iter_modules(caching.__path__):
        module = importlib.import_module(f"allocator_ref.caching.{info.name}")
        mixins += [f"{info.name}.{n}" for n, v in vars(module).items()
                   if isinstance(v, type) and n.endswith("Mixin") and v.__module__ == module.__name__]
    assert not mixins, f"mixins in caching/: {mixins}"
    for name in TWINS:
        assert name in vars(CachingAllocator), f"{name} is not defined in CachingAllocator itself"


def test_free_block_asks_try_merge_blocks_about_allocated_neighbours_too():
    """PyTorch's free_block calls try_merge_blocks for prev and next as they are; the guard is
    try_merge_blocks' own (lab 2 tells learners so, and plugs their function here)."""
    a = CachingAllocator(SimDevice("tiny-1gb"))
    asked = []
    original = a.try_merge_blocks

    def watching(dst, src, pool):
        asked.append(None if src is None else src.allocated)
        return original(dst, src, pool)
    a.try_merge_blocks = watching
    x, y, z = a.malloc(1000), a.malloc(1000), a.malloc(1000)
    a.free(y)                          # both neighbours allocated: asked twice, merges nothing
    assert asked == [True, True]
    a.free(x), a.free(z)
    a.close()
