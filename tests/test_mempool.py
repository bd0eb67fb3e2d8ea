"""PyTorch's ``TestMemPool`` (test/test_cuda.py, 2.11) restated for the reference allocator,
in native and expandable modes, plus the rules of ``PrivatePool`` the tests lean on.

Each test names the PyTorch test or C++ function it restates.  Expected numbers are worked
out by hand in the comments (sizes: kSmallBuffer 2 MiB, kLargeBuffer 20 MiB), never read
back from the allocator.  Every allocator the ``make_alloc`` fixture builds is checked with
``_check_memory_stat_consistency`` (restated in caching_helpers.py) when the test ends, with
its private pools still live.
"""
from __future__ import annotations

import threading

import pytest

import allocator_ref as ar
from allocator_ref.caching import PluggableAllocator, device_allocator
from caching_helpers import GiB, MiB, assert_consistent, fmt_size, make_alloc  # noqa: F401

MODES = {"native": "", "expandable": "expandable_segments:True"}


@pytest.fixture(params=list(MODES))
def mode(request):
    return request.param


def budget(a, mib: int) -> None:
    """``_setup_mempool_limited_memory_test``: allow exactly ``mib`` MiB (tiny-1gb has 1 GiB)."""
    f = mib / 1024
    assert int(f * GiB) == mib * MiB
    a.set_per_process_memory_fraction(f)


def pool_ids(a) -> list:
    return [s["segment_pool_id"] for s in a.segments()]


# ------------------------------------------------------------------ ids
def test_mempool_id(make_alloc):
    """test_mempool_id: both kinds of user pool id are (0, n), and each call makes a new n."""
    a = make_alloc()
    pool1 = ar.graph_pool_handle()
    pool2 = ar.MemPool(a).id
    assert pool1[0] == 0 and pool2[0] == 0
    assert pool2[1] != pool1[1]
    g = ar.CUDAGraph(a)                     # a graph's own pool: c10::generate_mempool_id(false) = (n, 0)
    g.capture_begin(a.device.create_stream())
    g.capture_end()                         # (CUDAGraph::pool needs capture_ended_)
    assert g.pool()[0] > 0 and g.pool()[1] == 0
    g.reset()


def test_mempool_multithread(make_alloc):
    """test_mempool_multithread: four threads making pools get four different ids."""
    a = make_alloc()
    ids, pools = [], []

    def make():
        p = ar.MemPool(a)
        pools.append(p)
        ids.append(p.id)
    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 4


# ------------------------------------------------------------ routing
def test_pool_id_in_snapshot(make_alloc, mode):
    """test_pool_id_in_snapshot: the segment and the alloc trace entry carry the pool's id."""
    a = make_alloc(MODES[mode])
    a.record_memory_history("all")
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        x = a.malloc(64 * 4)
    ss = a.snapshot()
    assert pool.id in [s["segment_pool_id"] for s in ss["segments"]]
    allocs = [e for e in ss["device_traces"][0] if e["action"] == "alloc"]
    assert [e["pool_id"] for e in allocs] == [pool.id]
    seg_events = [e for e in ss["device_traces"][0] if e["action"] in ("segment_alloc", "segment_map")]
    assert [e["pool_id"] for e in seg_events] == [pool.id]
    a.free(x)


def test_use_count_and_routing(make_alloc, mode):
    """MemPool::MemPool holds 1; use_mem_pool holds one more; only requests inside go to the pool."""
    a = make_alloc(MODES[mode])
    pool = ar.MemPool(a)
    assert pool.use_count() == 1
    outside = a.malloc(4 * MiB)
    with a.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = a.malloc(4 * MiB)
    assert pool.use_count() == 1
    after = a.malloc(4 * MiB)
    owner = {s["address"]: s["segment_pool_id"] for s in a.segments()}
    seg_of = lambda x: max(addr for addr in owner if addr <= x.ptr)
    assert owner[seg_of(inside)] == pool.id
    assert owner[seg_of(outside)] == (0, 0) and owner[seg_of(after)] == (0, 0)
    # a private pool's blocks never serve a default-pool request: `after` did not land in the pool
    assert seg_of(after) != seg_of(inside)
    assert_consistent(a)
    for x in (outside, inside, after):
        a.free(x)


def test_nested_mempool(make_alloc, mode):
    """test_nested_mempool: the innermost context wins; five 20 MiB tensors go 2 / 2 / 1."""
    a = make_alloc(MODES[mode])
    p1, p2, p3 = ar.MemPool(a), ar.MemPool(a), ar.MemPool(a)
    data = []
    alloc = lambda: data.append(a.malloc(20 * MiB))
    with a.use_mem_pool(p1):
        alloc()
        with a.use_mem_pool(p2):
            alloc()
            with a.use_mem_pool(p3):
                alloc()
            alloc()
        alloc()
    blocks = {p.id: [b for s in p.snapshot() for b in s["blocks"] if b["state"] == "active_allocated"]
              for p in (p1, p2, p3)}
    assert [len(blocks[p.id]) for p in (p1, p2, p3)] == [2, 2, 1]
    if mode == "native":        # 20 MiB = get_allocation_size(20 MiB): one cudaMalloc each
        assert [len(p.snapshot()) for p in (p1, p2, p3)] == [2, 2, 1]
    else:                       # a pool's two 20 MiB pages map side by side: one mapped range
        assert [len(p.snapshot()) for p in (p1, p2, p3)] == [1, 1, 1]
    assert_consistent(a)
    for x in data:
        a.free(x)


def test_mempool_ctx_multithread(make_alloc):
    """test_mempool_ctx_multithread: a thread outside the context allocates in the default pool
    while another thread's use_mem_pool block is open."""
    a = make_alloc()
    a.empty_cache()
    assert a.segments() == []
    nelem = 1024 * 1024                                   # int8: 1 MiB -> small pool, 2 MiB segments
    trigger, done = threading.Event(), threading.Event()
    seen = []

    def main_fn():
        pool = ar.MemPool(a)
        out1 = a.malloc(nelem)                            # default pool: a 2 MiB segment
        with a.use_mem_pool(pool):
            out = a.malloc(nelem)                         # the pool: its own 2 MiB segment
            a.free(out)
            trigger.set()
            done.wait(10)
        a.free(out1)

    def side_fn():
        trigger.wait(10)
        out = a.malloc(nelem)                             # not this thread's pool: default pool
        seen.append(a.segments())
        done.set()
        a.free(out)

    threads = [threading.Thread(target=main_fn), threading.Thread(target=side_fn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    (segments,) = seen
    assert len(segments) == 2
    active = {}
    for s in segments:
        active[s["segment_pool_id"]] = active.get(s["segment_pool_id"], 0) + s["active_size"]
    assert active[(0, 0)] == 2_097_152                    # out1 + the side thread's 1 MiB
    assert [v for k, v in active.items() if k != (0, 0)] == [0]


# ---------------------------------------------------------- release rules
def test_mempool_empty_cache(make_alloc, mode):
    """test_mempool_empty_cache: deleting the pool empties only that pool; the default pool's
    cached segment stays (nobody called empty_cache)."""
    a = make_alloc(MODES[mode])
    pool = ar.MemPool(a)
    x = a.malloc(4 * MiB)
    with a.use_mem_pool(pool):
        y = a.malloc(4 * MiB)
    a.free(y)
    a.free(x)
    assert sorted(pool_ids(a)) == sorted([(0, 0), pool.id])
    pid = pool.id
    del pool                                              # MemPool::~MemPool -> emptyCache(id)
    assert pool_ids(a) == [(0, 0)]
    assert pid not in a.device_allocator.graph_pools                       # cudaMalloc_count 0: the pool is gone


def test_pool_memory_waits_for_freeable(make_alloc, mode):
    """releasePool / release_cached_blocks: empty_cache frees a private pool's memory only once
    the pool is freeable (use_count 0) -- while the MemPool lives, its cache stays."""
    a = make_alloc(MODES[mode])
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        y = a.malloc(4 * MiB)
    a.free(y)
    reserved = a.memory_reserved()
    a.empty_cache()
    assert a.memory_reserved() == reserved and pool_ids(a) == [pool.id]
    pool.close()
    assert a.memory_reserved() == 0 and a.device_allocator.graph_pools == {}


def test_mempool_empty_cache_inactive(make_alloc):
    """test_mempool_empty_cache_inactive: a tensor outlives its (custom-allocator) pool; its memory
    goes back through the custom free only after the tensor is freed and empty_cache runs."""
    a = make_alloc()
    custom = device_allocator(a.device, "dummy")

    def f():
        pool = ar.MemPool(a, custom=custom)
        with a.use_mem_pool(pool):
            x = a.malloc(1024 * 1024 * 2 * 8)              # torch.arange(2M) int64: 16 MiB
        return x                                          # the pool object dies here
    x = f()
    assert (custom.alloc_calls, custom.free_calls) == (1, 0)
    a.free(x)
    assert custom.free_calls == 0
    a.empty_cache()
    assert custom.free_calls == 1 and a.device_allocator.graph_pools == {}


def test_mempool_with_allocator(make_alloc, mode):
    """test_mempool_with_allocator: 1 MiB tensors in a custom pool: 1, 1, then 2 segments;
    use_count 1 -> 2 -> 1; the pool's destructor frees through the custom free.  A custom
    allocator turns expandable segments off for its pool (``is_expandable_segments_active``)."""
    a = make_alloc(MODES[mode])
    custom = device_allocator(a.device, "dummy")
    pool = ar.MemPool(a, custom=custom)
    assert pool.use_count() == 1 and custom.alloc_calls == 0
    nbytes_1mb = 1024 * 1024
    with a.use_mem_pool(pool):
        out_0 = a.malloc(nbytes_1mb)
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    assert custom.alloc_calls == 1
    out_non_pool = a.malloc(nbytes_1mb)
    with a.use_mem_pool(pool):
        assert len(pool.snapshot()) == 1
        out_1 = a.malloc(nbytes_1mb)                      # fits in the first 2 MiB buffer
        assert len(pool.snapshot()) == 1
        out_2 = a.malloc(nbytes_1mb)                      # needs a second one
        assert len(pool.snapshot()) == 2
    assert all(not s["is_expandable"] for s in pool.snapshot())
    assert custom.alloc_calls == 2
    for x in (out_0, out_1, out_2):
        a.free(x)
    del pool
    assert custom.free_calls == 2 and custom.live == {}
    a.free(out_non_pool)


def test_tensor_delete_after_allocator_delete(make_alloc):
    """test_tensor_delete_after_allocator_delete: the PrivatePool keeps the custom allocator alive."""
    a = make_alloc()
    custom = device_allocator(a.device, "dummy")
    pool = ar.MemPool(a, custom=custom)
    with a.use_mem_pool(pool):
        data = a.malloc(16)
    del pool
    assert custom.free_calls == 0
    a.free(data)
    a.empty_cache()
    assert custom.free_calls == 1


# ----------------------------------------------------- no_split, use_on_oom
def test_mempool_no_split(make_alloc, mode):
    """test_mempool_no_split / should_split: a no_split pool never splits a block."""
    a = make_alloc(MODES[mode])
    pool_split, pool_no_split = ar.MemPool(a), ar.MemPool(a, no_split=True)
    keep = []
    for _ in range(2):
        with a.use_mem_pool(pool_split):
            keep.append(a.malloc(4 * MiB))
        with a.use_mem_pool(pool_no_split):
            keep.append(a.malloc(4 * MiB))
    count_blocks = lambda p: sum(len(s["blocks"]) for s in p.snapshot())
    # split pool: one 20 MiB segment (or page) cut into 4 + 4 + 12 MiB
    assert count_blocks(pool_split) == 3
    assert all(b["state"] != "inactive" for s in pool_no_split.snapshot() for b in s["blocks"])
    assert count_blocks(pool_no_split) == 2 < count_blocks(pool_split)
    if mode == "native":    # two whole 20 MiB segments, one block each
        assert len(pool_no_split.snapshot()) == 2 > len(pool_split.snapshot()) == 1
        assert all(len(s["blocks"]) == 1 for s in pool_no_split.snapshot())
    else:                   # two 20 MiB pages mapped side by side: one range, two unsplit blocks
        assert [[b["size"] for b in s["blocks"]] for s in pool_no_split.snapshot()] == [[20 * MiB, 20 * MiB]]
    for x in keep:
        a.free(x)


def test_mempool_limited_memory_with_allocator(make_alloc, mode):
    """test_mempool_limited_memory_with_allocator: with 80 MiB allowed, a freed 40 MiB block of a
    use_on_oom pool serves a default-pool 30 MiB request at the same address; the other pool never."""
    a = make_alloc(MODES[mode], profile="tiny-1gb")
    custom = device_allocator(a.device, "dummy")
    pool_do_not_use = ar.MemPool(a, custom=custom)
    pool_use = ar.MemPool(a, custom=custom, use_on_oom=True)
    budget(a, 80)
    with a.use_mem_pool(pool_do_not_use):
        x_a = a.malloc(40 * MiB)
    with a.use_mem_pool(pool_use):
        x_b = a.malloc(40 * MiB)
    b_ptr = x_b.ptr
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(40 * MiB)
    a.free(x_a)
    a.free(x_b)
    c = a.malloc(30 * MiB)                                # try_mempool_fallback
    assert c.ptr == b_ptr
    assert a.segments()[[s["address"] for s in a.segments()].index(b_ptr)]["segment_pool_id"] == pool_use.id
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(30 * MiB)                                # 10 MiB left in pool_use; never pool_do_not_use
    a.free(c)
    with a.use_mem_pool(pool_use):
        e = a.malloc(20 * MiB)
    assert e.ptr == b_ptr
    a.free(e)
    assert pool_use.use_count() == 1                      # the fallback's begin/release balanced
    del pool_use, pool_do_not_use
    assert a.device_allocator.graph_pools == {} and custom.live == {}


def test_deleted_mempool_not_used_on_oom(make_alloc, mode):
    """test_deleted_mempool_not_used_on_oom: ~MemPool drops the use_on_oom flag, so only the live
    pool serves the fallback."""
    a = make_alloc(MODES[mode], profile="tiny-1gb")
    custom = device_allocator(a.device, "dummy")
    budget(a, 40)
    for _ in range(10):
        p = ar.MemPool(a, custom=custom, use_on_oom=True)
        with a.use_mem_pool(p):
            x = a.malloc(40 * MiB)
        a.free(x)
        del p
    assert a.device_allocator.use_on_oom_pools == {} and a.device_allocator.graph_pools == {}
    live = ar.MemPool(a, custom=custom, use_on_oom=True)
    with a.use_mem_pool(live):
        x = a.malloc(40 * MiB)
    base = x.ptr
    a.free(x)
    b = a.malloc(20 * MiB)
    c = a.malloc(20 * MiB)
    assert (b.ptr, c.ptr) == (base, base + 20 * MiB)     # both carved from the live pool's segment
    assert set(pool_ids(a)) == {live.id}
    a.free(b)
    a.free(c)
    del live


def test_mempool_emptycache_multithread(make_alloc):
    """test_mempool_emptycache_multithread: empty_cache inside a thread's pool context frees
    nothing of that pool (the pool is in use).  The reference allocator has no mutex, so the
    threads take turns for each call; their contexts are open at the same time."""
    a = make_alloc()
    n = 4
    pools = [ar.MemPool(a) for _ in range(n)]
    inside = threading.Barrier(n)
    turn = threading.Lock()

    def work(pool):
        with a.use_mem_pool(pool):
            inside.wait(10)                               # every thread's context is open now
            with turn:
                x = a.malloc(16)
                a.free(x)
                a.empty_cache()
    threads = [threading.Thread(target=work, args=(p,)) for p in pools]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for p in pools:
        assert len(p.snapshot()) == 1


# ------------------------------------------------------------ stats, OOM
def test_stats_count_private_pools_in_small_and_large(make_alloc, mode):
    """get_stat_types_for_pool: a private pool's blocks count in AGGREGATE and small/large, like
    the default pools'; the stats/snapshot invariant holds with pools live."""
    a = make_alloc(MODES[mode])
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        s = a.malloc(1000)                                # small: 2 MiB buffer
        big = a.malloc(30 * MiB)                          # large: 30 MiB
    st = a.memory_stats()
    assert st["allocated_bytes.small_pool.current"] == 1024
    assert st["allocated_bytes.large_pool.current"] == 30 * MiB
    assert st["reserved_bytes.small_pool.current"] == 2 * MiB
    assert st["reserved_bytes.large_pool.current"] == (40 * MiB if mode == "expandable" else 30 * MiB)
    assert_consistent(a)
    a.free(s)
    assert_consistent(a)
    a.free(big)
    del pool
    assert a.memory_stats()["reserved_bytes.all.current"] == 0


def test_oom_message_private_pool_clause(make_alloc, mode):
    """malloc's OOM message: "with X allocated in private pools (e.g., CUDA Graphs), " where X is
    the sum of the private pools' FREE blocks (PyTorch's quirk), added to "allocated" and taken
    from "reserved but unallocated"."""
    a = make_alloc(MODES[mode], profile="tiny-1gb")
    budget(a, 64)
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        p = a.malloc(30 * MiB)
    a.free(p)                                             # 30 MiB (40 MiB page when expandable) free in the pool
    x = a.malloc(20 * MiB)
    free_in_pool = 40 * MiB if mode == "expandable" else 30 * MiB
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(30 * MiB)
    msg = str(err.value)
    allocated = 20 * MiB
    reserved = a.memory_reserved()
    assert f"with {fmt_size(free_in_pool)} allocated in private pools (e.g., CUDA Graphs), " in msg
    assert f"Of the allocated memory {fmt_size(allocated + free_in_pool)} is allocated by PyTorch, " in msg
    assert f"and {fmt_size(reserved - allocated - free_in_pool)} is reserved by PyTorch but unallocated" in msg
    a.free(x)
    del pool


def test_no_private_pool_clause_without_pools(make_alloc):
    a = make_alloc(profile="tiny-1gb")
    budget(a, 32)
    with pytest.raises(ar.OutOfMemoryError) as err:
        a.malloc(40 * MiB)
    assert "private pools" not in str(err.value)


# ------------------------------------------------------------- bad input
def test_bad_input(make_alloc):
    a = make_alloc()
    other = make_alloc()
    with pytest.raises(TypeError, match="CachingAllocator"):
        ar.MemPool("not an allocator")
    with pytest.raises(TypeError, match="PluggableAllocator"):
        ar.MemPool(a, custom=object())
    with pytest.raises(TypeError, match="MemPool"):
        with ar.use_mem_pool((0, 1)):
            pass
    pool = ar.MemPool(a)
    with pytest.raises(ValueError, match="another allocator"):
        other.use_mem_pool(pool)
    with pytest.raises(TypeError, match="pair of non-negative ints"):
        a.device_allocator.begin_allocate_to_pool("pool", lambda s: True)
    with pytest.raises(ValueError, match="no private pool"):
        a.device_allocator.release_pool((0, 999_999))
    with pytest.raises(TypeError, match="callables"):
        PluggableAllocator(1, 2)
    pool.close()
    with pytest.raises(ValueError, match="closed"):
        with a.use_mem_pool(pool):
            pass
    assert a.device_allocator.captures_underway == [] and a.device_allocator.graph_pools == {}   # nothing left half-done
    assert_consistent(a)


def test_custom_allocator_out_of_memory_is_an_oom(make_alloc):
    """allocPrimitive: a custom alloc returning null is cudaErrorMemoryAllocation -> the ladder -> OOM."""
    a = make_alloc()
    refusing = PluggableAllocator(lambda size: None, lambda ptr: None, "empty")
    pool = ar.MemPool(a, custom=refusing)
    with a.use_mem_pool(pool):
        with pytest.raises(ar.OutOfMemoryError):
            a.malloc(MiB)
    assert refusing.alloc_calls >= 1 and a.memory_reserved() == 0


# --------------------------------------- _check_memory_stat_consistency, pools live
@pytest.mark.parametrize("conf", list(MODES.values()), ids=list(MODES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stats_consistent_after_every_step_with_pools_live(make_alloc, conf, seed):
    """test_cuda_multigpu.py::test_memory_stats's invariant (``_check_memory_stat_consistency``
    after every step), on a seeded random program that mixes the default pools, three MemPools
    (one no_split, one use_on_oom) entered and left at random, cross-stream frees and empty_cache.
    At the end, freeing everything and destroying the pools gives every byte back."""
    import random
    rng = random.Random(seed)
    a = make_alloc(conf, profile="tiny-1gb")
    side = a.device.create_stream()
    pools = [ar.MemPool(a), ar.MemPool(a, no_split=True), ar.MemPool(a, use_on_oom=True)]
    live, contexts = [], []
    for step in range(300):
        op = rng.random()
        if op < 0.45:
            size = rng.choice([rng.randint(1, 1 << 20), rng.randint(1 << 20, 24 << 20)])
            live.append(a.malloc(size))
        elif op < 0.8 and live:
            x = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.2:
                a.record_stream(x, side)
                a.device.sleep(side, 50.0)
            a.free(x)
        elif op < 0.88 and len(contexts) < 3:
            pool = rng.choice(pools)
            ctx = a.use_mem_pool(pool)
            try:
                ctx.__enter__()
                contexts.append(ctx)
            except RuntimeError:            # that pool's context is already open: refused, but 2.11's
                a.device_allocator.release_pool(pool.id)     # beginAllocateToPool counted one owner first: undo it
        elif op < 0.96 and contexts:
            contexts.pop().__exit__(None, None, None)
        else:
            a.empty_cache()
        assert_consistent(a)
    while contexts:
        contexts.pop().__exit__(None, None, None)
    for x in live:
        a.free(x)
    for p in pools:
        p.close()
    a.device.synchronize()
    a.empty_cache()
    assert a.memory_reserved() == 0
    if not conf:
        assert a.device_allocator.graph_pools == {}
    else:   # see test_expandable_pool_count_can_outlive_its_memory: emptied pools may stay listed
        assert all(p.use_count == 0 and not p.free_bytes() for p in a.device_allocator.graph_pools.values())
    assert_consistent(a)


def test_expandable_pool_count_can_outlive_its_memory(make_alloc):
    """A PyTorch quirk the model keeps: with expandable segments, ``alloc_block`` adds 1 to the pool's
    ``cudaMalloc_count`` per successful ``try_allocate_expandable_block`` while ``unmap_block`` takes 1
    per unmap.  Two 20 MiB tensors map a page each (count 2); freed, their pages merge and go back in
    ONE unmap (count 1): the pool holds no memory yet is never erased from ``graph_pools``."""
    a = make_alloc("expandable_segments:True")
    pool = ar.MemPool(a)
    with a.use_mem_pool(pool):
        x, y = a.malloc(20 * MiB), a.malloc(20 * MiB)
    assert a.device_allocator.graph_pools[pool.id].cudaMalloc_count == 2
    a.free(x)
    a.free(y)
    pid = pool.id
    pool.close()                                        # releasePool + emptyCache(id): one unmap
    assert a.memory_reserved() == 0
    assert a.device_allocator.graph_pools[pid].cudaMalloc_count == 1 and pid in a.device_allocator.graph_pools_freeable
    a.empty_cache()
    assert pid in a.device_allocator.graph_pools                         # a zombie: nothing left to release


@pytest.mark.gpu
def test_mempool_on_the_real_device():
    """The same pool rules on the real GPU (CudaDevice): routing, custom allocator, release."""
    from conftest import open_kind
    dev = open_kind("cuda")
    a = ar.CachingAllocator(dev)
    custom = device_allocator(dev, "cudaMalloc")
    pool = ar.MemPool(a, custom=custom)
    with a.use_mem_pool(pool):
        x = a.malloc(MiB)
    assert {s["segment_pool_id"] for s in a.segments()} == {pool.id}
    assert custom.alloc_calls == 1
    a.free(x)
    pool.close()
    assert custom.free_calls == 1 and a.memory_reserved() == 0
    assert_consistent(a)
    dev.close()


def test_use_on_oom_fallback_skips_the_pools_expandable_blocks(make_alloc):
    """try_mempool_fallback builds ``mempool_params`` with ``is_expandable_segments_active`` false, and
    get_free_block then steps over expandable blocks ("only finding non-expandable blocks"): a plain
    use_on_oom MemPool under expandable_segments:True maps expandable pages, which the fallback never
    lends. (The model used to ask the global setting and lent them.)"""
    a = make_alloc("expandable_segments:True", profile="tiny-1gb")
    a.set_per_process_memory_fraction(80 / 1024)
    spare = ar.MemPool(a, use_on_oom=True)
    with a.use_mem_pool(spare):
        held = a.malloc(40 * MiB)
    assert [s["is_expandable"] for s in spare.snapshot()] == [True]
    filler = a.malloc(40 * MiB)
    a.free(held)                                         # 40 MiB free in the spare pool, expandable
    with pytest.raises(ar.OutOfMemoryError):
        a.malloc(30 * MiB)
    a.free(filler)


def test_use_on_oom_fallback_still_lends_non_expandable_blocks(make_alloc):
    """The same fallback with a custom-allocator pool (no expandable segments there): the freed
    block serves the default-pool request, as test_mempool_limited_memory_with_allocator asserts."""
    a = make_alloc("expandable_segments:True", profile="tiny-1gb")
    a.set_per_process_memory_fraction(80 / 1024)
    spare = ar.MemPool(a, use_on_oom=True, custom=device_allocator(a.device, "dummy"))
    with a.use_mem_pool(spare):
        held = a.malloc(40 * MiB)
    filler = a.malloc(40 * MiB)
    a.free(held)
    borrowed = a.malloc(30 * MiB)
    assert borrowed.ptr == held.ptr
    a.free(borrowed), a.free(filler)
