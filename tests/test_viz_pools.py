"""The block map colours segments by pool (viz/blockmap.py ``pool_colour``): a stripe per segment and a
key per group, grey for the default pools, one stable colour per private pool id."""
import re

import allocator_ref as ar
from allocator_ref.device import SimDevice
from allocator_ref.viz.blockmap import DEFAULT_POOL_COLOUR, pool_colour, render_blockmap

MiB = 2**20


def stripes(svg):
    return re.findall(r'<rect class="ar-pool-stripe" data-pool-id="(\d+),(\d+)"[^>]*fill="([^"]+)"', svg)


def test_each_segment_carries_its_pool_and_colour():
    a = ar.CachingAllocator(SimDevice("h100-80gb"))
    p1, p2 = ar.MemPool(a), ar.MemPool(a)
    keep = [a.malloc(4 * MiB)]
    with a.use_mem_pool(p1):
        keep += [a.malloc(4 * MiB), a.malloc(100)]
    with a.use_mem_pool(p2):
        keep.append(a.malloc(30 * MiB))
    svg = render_blockmap(a)
    got = stripes(svg)
    assert len(got) == len(a.segments()) == 4
    by_pool = {}
    for first, second, fill in got:
        by_pool.setdefault((int(first), int(second)), set()).add(fill)
    assert set(by_pool) == {(0, 0), p1.id, p2.id}
    assert all(len(fills) == 1 for fills in by_pool.values())            # one colour per pool
    assert by_pool[(0, 0)] == {DEFAULT_POOL_COLOUR}
    assert by_pool[p1.id] == {pool_colour(p1.id)} and by_pool[p2.id] == {pool_colour(p2.id)}
    assert pool_colour(p1.id) != pool_colour(p2.id) != DEFAULT_POOL_COLOUR
    # every group heading has a key in its pool's colour
    keys = re.findall(r'<rect class="ar-pool-key"[^>]*fill="([^"]+)"', svg)
    assert set(keys) == {DEFAULT_POOL_COLOUR, pool_colour(p1.id), pool_colour(p2.id)}
    for x in keep:
        a.free(x)


def test_pool_colour_is_stable_and_defaults_to_grey():
    assert pool_colour((0, 0)) == pool_colour(None) == DEFAULT_POOL_COLOUR
    assert pool_colour((0, 5)) == pool_colour((0, 5))
    assert len({pool_colour((0, n)) for n in range(1, 8)}) == 7      # neighbours differ


def test_captions_name_the_private_pool():
    """The player's captions (viz/frames.py) say when a block is in a private pool."""
    from allocator_ref.viz.frames import record_frames
    a = ar.CachingAllocator(SimDevice("h100-80gb"))
    pool = ar.MemPool(a)
    with record_frames(a) as frames:
        x = a.malloc(4 * MiB)
        with a.use_mem_pool(pool):
            y = a.malloc(4 * MiB)
    captions = [f.caption for f in frames if f.event["action"] == "alloc"]
    assert len(captions) == 2
    assert "private pool" not in captions[0]
    assert f"of private pool {pool.id}" in captions[1]
    a.free(x)
    a.free(y)
