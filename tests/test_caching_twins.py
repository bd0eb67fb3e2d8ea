"""Every ``DeviceCachingAllocator`` member is called where PyTorch calls it, in PyTorch's order.

``caching/device_caching_allocator.py`` promises a learner with ``c10/cuda/CUDACachingAllocator.cpp`` open
beside it that each PyTorch member has a twin of the same name.  A twin that exists but is not called
(its rule inlined somewhere else) breaks that promise silently: a learner who edits it sees
nothing change.  So each twin below is wrapped on a live allocator, workloads that reach every
rung of PyTorch's ``malloc``/``free``/``emptyCache`` are run, and the test checks that the twin
was called *by the function PyTorch calls it from* (the caller's name, read from the frame) and,
inside ``malloc``, ``free``, the release and event functions and the checkpoints, in PyTorch's order.
A caller above DeviceCachingAllocator is named by its own method (NativeCachingAllocator's
``malloc`` calls DeviceCachingAllocator's ``malloc``; torch.cuda's ``memory_stats`` calls ``get_stats``).

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
from allocator_ref.caching.device_caching_allocator import DeviceCachingAllocator
from allocator_ref.device import SimDevice

MiB = 1 << 20

# twin -> the functions PyTorch calls it from (every pair listed must be seen): DeviceCachingAllocator
# members, NativeCachingAllocator's (malloc, free, record_stream, set_memory_fraction,
# set_checkpoint_pool_state) and torch.cuda's / MemPool's / CUDAGraph's above them.
TWINS = {
    # the entry points: NativeCachingAllocator (or torch.cuda) calls them
    "malloc": {"malloc"},                                   # NativeCachingAllocator::malloc
    "free": {"free", "free_blocks_allocated_to_pool", "set_segment_state_to_checkpoint"},
    "record_stream": {"record_stream"},                     # NativeCachingAllocator::recordStream
    "empty_cache": {"empty_cache"},                         # torch.cuda.empty_cache (and MemPool's destructor)
    "attach_out_of_memory_observer": {"attach_out_of_memory_observer"},
    "attach_allocator_trace_tracker": {"attach_allocator_trace_tracker"},
    "record_history": {"record_memory_history"},
    "snapshot": {"segments"},                               # torch.cuda.memory._snapshot
    "get_checkpoint_state": {"get_checkpoint_state"},
    "set_checkpoint_pool_state": {"set_checkpoint_pool_state"},
    # private pools: MemPool, use_mem_pool, CUDAGraph and the malloc ladder's use_on_oom rung
    "create_or_incref_pool": {"__init__", "begin_allocate_to_pool"},
    "get_private_pool": {"release_pool", "get_pool_use_count"},
    "begin_allocate_to_pool": {"use_mem_pool", "capture_begin", "try_mempool_fallback"},
    "end_allocate_to_pool": {"use_mem_pool", "capture_end", "try_mempool_fallback"},
    "release_pool": {"use_mem_pool", "close", "reset", "try_mempool_fallback"},
    "get_pool_use_count": {"use_count"},
    "set_use_on_oom": {"__init__", "close"},
    "set_no_split": {"__init__"},
    # graph_capture_record_stream_reuse
    "record_free_markers": {"free"},
    "free_safe_blocks_in_capture": {"malloc"},
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
                     "map_block", "unmap_block", "snapshot"},
    "maybe_gather_context": {"malloc", "free", "empty_cache", "get_checkpoint_state", "set_checkpoint_pool_state"},
    "get_all_blocks": {"snapshot"},
    # the stats and the memory fraction: torch.cuda's functions reach DeviceCachingAllocator's
    "get_stats": {"memory_stats"},
    "reset_accumulated_stats": {"reset_accumulated_memory_stats"},
    "reset_peak_stats": {"reset_peak_memory_stats"},
    "set_memory_fraction": {"set_memory_fraction"},       # NativeCachingAllocator::setMemoryFraction
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


def _caller() -> str:
    return sys._getframe(2).f_code.co_name


# PyTorch's order of the calls each of these makes (a call may be skipped or repeated, not
# reordered), read from the DeviceCachingAllocator member of that name.
ORDER = {
    "malloc": ["maybe_gather_context", "free_safe_blocks_in_capture", "process_events", "round_size",
               "get_pool", "get_allocation_size", "get_free_block", "trigger_free_memory_callbacks",
               "get_free_block", "garbage_collect_cached_blocks", "alloc_block", "try_mempool_fallback",
               "release_available_cached_blocks", "alloc_block", "release_cached_blocks", "alloc_block",
               "record_trace", "should_split", "alloc_found_block"],
    "free": ["maybe_gather_context", "record_trace", "record_free_markers", "insert_events", "free_block"],
    "release_cached_blocks": ["synchronize_and_free_events", "release_blocks", "release_blocks"],
    "release_blocks": ["release_block", "unmap_block", "release_expandable_segment"],
    "process_events": ["insert_events_deferred_until_no_capture", "free_block"],
    "synchronize_and_free_events": ["insert_events_deferred_until_no_capture", "free_block"],
    "insert_events_deferred_until_no_capture": ["remove_cudagraph_stream_uses", "insert_events", "free_block"],
    # (release_expandable_segment is this package's: it gives back a reservation it could not map,
    # which PyTorch leaks; see try_allocate_expandable_block)
    "try_allocate_expandable_block": ["find_expandable_block", "map_block", "release_expandable_segment"],
    "try_mempool_fallback": ["begin_allocate_to_pool", "get_pool", "get_free_block", "end_allocate_to_pool",
                             "release_pool"],
    "get_checkpoint_state": ["maybe_gather_context", "insert_events_deferred_until_no_capture",
                             "get_private_pool_head_blocks"],
    "set_checkpoint_pool_state": ["maybe_gather_context", "free_blocks_allocated_to_pool",
                                  "set_segment_state_to_checkpoint"],
}


def _watch(allocator: CachingAllocator, seen: set, log: list) -> None:
    """Replace each twin on this allocator's DeviceCachingAllocator by a wrapper that notes
    (twin, caller) and calls it; ``log`` gets every call, in order."""
    da = allocator.device_allocator
    for name in TWINS:
        original = getattr(da, name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            caller = _caller()
            seen.add((_name, caller))
            log.append((_name, caller, sys._getframe(1)))    # the frame itself: kept alive, never reused
            return _original(*args, **kwargs)
        setattr(da, name, wrapper)


def _workloads(seen: set, log: list) -> None:
    def new(conf: str = "", profile: str = "tiny-1gb") -> CachingAllocator:
        a = CachingAllocator(SimDevice(profile), conf)
        _watch(a, seen, log)
        return a

    # split, merge, free callbacks on a miss (history on: each step writes its TraceEntry)
    a = new()
    a.record_memory_history()
    a.attach_out_of_memory_observer(lambda *args: None)
    a.attach_allocator_trace_tracker(lambda entry: None)
    a.device_allocator.free_memory_callbacks.append(lambda: False)
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
    delta = a.set_checkpoint_pool_state(state)     # frees out (freeBlocksAllocatedToPool), makes it again
    assert out.freed and delta.ptrs_freed == [out.ptr]
    a.free(delta.allocations_created[0])
    g.reset()
    assert pool.use_count() == 1
    del pool
    a.close()

    # a MemPool that never splits
    a = new()
    pool = ar.MemPool(a, no_split=True)
    with a.use_mem_pool(pool):
        a.free(a.malloc(1000))
    pool.close()
    a.close()

    # graph_capture_record_stream_reuse: a cross-stream free in a capture gets free markers, and
    # the next malloc on its stream frees it once the markers precede the stream's work
    a = new("graph_capture_record_stream_reuse:True")
    dev = a.device
    s1, s2 = dev.create_stream(), dev.create_stream()
    g = ar.CUDAGraph(a)
    g.capture_begin(s1)
    sink = a.malloc(32, s1)
    dev.fill(sink.ptr, 32, 0, s1)
    data = a.malloc(32, s1)
    _fork(dev, s1, s2)
    buf = a.malloc(32, s2)
    dev.copy(buf.ptr, data.ptr, 32, s2)
    a.record_stream(data, s2)
    a.free(data)
    _fork(dev, s2, s1)
    dev.fill(sink.ptr, 32, 1, s1)
    again = a.malloc(32, s1)
    g.capture_end()
    assert again.ptr == data.ptr
    for x in (sink, buf, again):
        a.free(x)
    g.reset()
    a.close()


def _fork(dev, src, dst):
    event = dev.create_event()
    event.record(src)
    dev.wait_event(dst, event)


@pytest.fixture(scope="module")
def watched():
    seen: set = set()
    log: list = []
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
        _workloads(seen, log)
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
    return seen, log


@pytest.fixture(scope="module")
def calls(watched):
    return watched[0]


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
    """Each DeviceCachingAllocator member a chapter or lab names in backticks is in TWINS."""
    named = set()
    for path in glob.glob("chapters/*.md") + glob.glob("labs/source/*.md"):
        with open(path, encoding="utf-8") as f:
            named |= set(re.findall(r"`([a-z_]+)(?:\(.*?\))?`", f.read()))
    methods = {n for n in named if callable(getattr(DeviceCachingAllocator, n, None)) and not n.startswith("_")}
    unchecked = sorted(methods - set(TWINS))
    assert not unchecked, f"the course names {unchecked}: add each to TWINS with PyTorch's caller"


def test_editing_get_pool_changes_where_malloc_puts_a_request():
    """A learner who edits get_pool sees the change: malloc asks get_pool, it does not inline it."""
    a = CachingAllocator(SimDevice("tiny-1gb"))
    da = a.device_allocator
    da.get_pool = lambda size, stream=None: da.large_blocks     # every request to the large pool
    x = a.malloc(1000)
    assert x._block.pool is da.large_blocks
    a.free(x)
    assert len(da.large_blocks) == 1 and len(da.small_blocks) == 0
    a.close()


def test_block_key_is_the_pool_order():
    """BlockPool orders by Block.key() (``BlockComparatorSize``): changing key() changes the order."""
    pool = BlockPool(is_small=False)
    blocks = [Block(ptr, size, None, 0, pool) for ptr, size in ((0x3000, 4096), (0x1000, 8192), (0x2000, 4096))]
    for b in blocks:
        pool.insert_into_blocks(b)
    assert [b.ptr for b in pool] == [0x2000, 0x3000, 0x1000]     # (stream, size, address)
    assert list(pool).index(blocks[1]) == 2


def _calls_made_by(log: list, caller: str) -> list:
    """For each call of DeviceCachingAllocator's ``caller`` (one frame), the twins it called, in order."""
    code = getattr(DeviceCachingAllocator, caller).__code__
    runs: dict = {}
    for twin, _who, frame in log:
        if frame.f_code is code:
            runs.setdefault(id(frame), []).append(twin)
    return list(runs.values())


def _follows(calls: list, order: list) -> bool:
    """True if ``calls`` walks ``order`` forwards: steps may be left out or repeated (a loop), never
    taken back."""
    at = 0
    for call in calls:
        while at < len(order) and order[at] != call:
            at += 1
        if at == len(order):
            return False
    return True


@pytest.mark.parametrize("caller", sorted(ORDER))
def test_twins_are_called_in_pytorchs_order(watched, caller):
    runs = _calls_made_by(watched[1], caller)
    assert runs, f"{caller} was never seen calling a twin"
    wrong = [run for run in runs if not _follows(run, ORDER[caller])]
    assert not wrong, f"{caller} called its twins out of PyTorch's order {ORDER[caller]}: {wrong[0]}"
    # the order check can fail: the same calls reversed do not follow it
    longest = max(runs, key=lambda run: len(set(run)))
    assert len(set(longest)) < 2 or not _follows(list(reversed(longest)), ORDER[caller])


def test_one_class_holds_every_device_caching_allocator_function():
    """No mixin: no layer inherits, and no caching/ module defines a *Mixin."""
    import allocator_ref.caching as caching
    import pkgutil, importlib
    assert CachingAllocator.__mro__ == (CachingAllocator, object)
    assert DeviceCachingAllocator.__mro__ == (DeviceCachingAllocator, object)
    mixins = []
    for info in pkgutil.iter_modules(caching.__path__):
        module = importlib.import_module(f"allocator_ref.caching.{info.name}")
        mixins += [f"{info.name}.{n}" for n, v in vars(module).items()
                   if isinstance(v, type) and n.endswith("Mixin") and v.__module__ == module.__name__]
    assert not mixins, f"mixins in caching/: {mixins}"
    for name in TWINS:
        assert name in vars(DeviceCachingAllocator), f"{name} is not defined in DeviceCachingAllocator itself"


def test_free_block_asks_try_merge_blocks_about_allocated_neighbours_too():
    """PyTorch's free_block calls try_merge_blocks for prev and next as they are; the guard is
    try_merge_blocks' own (lab 2 tells learners so, and plugs their function here)."""
    a = CachingAllocator(SimDevice("tiny-1gb"))
    asked = []
    original = a.device_allocator.try_merge_blocks

    def watching(dst, src, pool):
        asked.append(None if src is None else src.allocated)
        return original(dst, src, pool)
    a.device_allocator.try_merge_blocks = watching
    x, y, z = a.malloc(1000), a.malloc(1000), a.malloc(1000)
    a.free(y)                          # both neighbours allocated: asked twice, merges nothing
    assert asked == [True, True]
    a.free(x), a.free(z)
    a.close()
