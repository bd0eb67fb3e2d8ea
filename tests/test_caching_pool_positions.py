"""``BlockPool``'s positions play C++'s set iterators (``lower_bound``, ``*it``, ``++it``, ``erase(it)``)
on SortedList's internal lists.  Checked against a plain sorted list, with sublists so short that
every walk and every erase crosses sublist boundaries (and erases merge sublists)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator_ref.caching.block import Block, BlockPool

KEYS = st.tuples(st.integers(0, 2), st.integers(1, 40))     # (stream, size in 512 B units)


def _pool(entries, load):
    pool = BlockPool(is_small=False)
    pool.blocks._reset(load)                     # tiny sublists: positions span many of them
    for ptr, (stream, units) in enumerate(entries):
        pool.insert_into_blocks(Block(ptr * 1 << 20, units * 512, None, stream, pool))
    return pool


def _walk(pool, it):
    seen = []
    while it is not None:
        seen.append(pool.at(it))
        it = pool.next_position(it)
    return seen


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(KEYS, max_size=60), probes=st.lists(KEYS, min_size=1, max_size=10),
       load=st.integers(4, 8))
def test_positions_agree_with_a_sorted_list(entries, probes, load):
    pool = _pool(entries, load)
    for stream, units in probes:
        order = list(pool)                                        # (stream, size, address) order
        it = pool.lower_bound(stream, units * 512)
        expected = [b for b in order if (b.stream_key, b.size, b.ptr) >= (stream, units * 512, 0)]
        assert _walk(pool, it) == expected                        # *it, then ++it to the end
        assert pool.best_fit(stream, units * 512) is (expected[0] if expected else None)
        if it is not None:
            taken = pool.at(it)
            pool.erase(it)                                        # erase(it): that block and no other
            assert list(pool) == [b for b in order if b is not taken]
            pool.blocks._check()                                  # SortedList's own invariants hold


def test_erase_at_the_end_of_a_sublist_and_of_the_pool():
    pool = _pool([(0, u) for u in range(1, 30)], load=4)
    it = pool.lower_bound(0, 29 * 512)                            # the last block of the pool
    assert pool.at(it).size == 29 * 512 and pool.next_position(it) is None
    pool.erase(it)
    assert pool.lower_bound(0, 29 * 512) is None and pool.at(None) is None
    assert [b.size // 512 for b in pool] == list(range(1, 29))
