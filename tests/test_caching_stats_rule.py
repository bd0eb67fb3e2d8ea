"""The current/peak/allocated/freed rule is written once (``Stat.increase`` / ``Stat.decrease``,
RMM's counter) and every bundle goes through it, for the stat types a pool selects
(``get_stat_types_for_pool``: AGGREGATE and the pool's own)."""
from __future__ import annotations

import pytest

from allocator_ref.caching.block import BlockPool
from allocator_ref.caching.stats import AGGREGATE, LARGE_POOL, SMALL_POOL, DeviceStats, Stat

SMALL = BlockPool(is_small=True).stat_types
LARGE = BlockPool(is_small=False).stat_types


def test_pools_select_aggregate_and_their_own_stat_type():
    assert SMALL == (AGGREGATE, SMALL_POOL) and LARGE == (AGGREGATE, LARGE_POOL)


def test_peak_follows_current_up_never_down():
    s = Stat()
    s.increase(5), s.decrease(3), s.increase(2)
    assert (s.current, s.peak, s.allocated, s.freed) == (4, 5, 7, 3)


def test_every_bundle_moves_stats_through_the_one_rule(monkeypatch):
    moves = []
    monkeypatch.setattr(Stat, "increase", lambda self, amount: moves.append(("+", amount)))
    monkeypatch.setattr(Stat, "decrease", lambda self, amount: moves.append(("-", amount)))
    stats = DeviceStats()
    stats.on_alloc_found_block(SMALL, 1024, 1000)
    stats.on_free(SMALL, 1024)
    stats.on_free_block(SMALL, 1024, 1000)
    # five stats up, two down, three down: each for AGGREGATE and the pool
    assert [m[0] for m in moves] == ["+"] * 10 + ["-"] * 4 + ["-"] * 6
    assert sorted(a for sign, a in moves if sign == "+") == sorted([1, 1, 1024, 1024, 1, 1, 1024, 1024, 1000, 1000])
    moves.clear()
    stats.on_free_block(SMALL, 1024, 1000, net_inactive_split=-1, net_inactive_split_bytes=2048)
    assert moves == [("-", 1), ("+", 2048), ("-", 1), ("-", 1024), ("-", 1000)] * 2


def test_bundles_touch_aggregate_and_the_pool_only():
    stats = DeviceStats()
    stats.on_alloc_found_block(LARGE, 4096, 4000)
    for name, amount in (("allocation", 1), ("allocated_bytes", 4096), ("active", 1),
                         ("active_bytes", 4096), ("requested_bytes", 4000)):
        assert stats[name][AGGREGATE].current == stats[name][LARGE_POOL].current == amount
        assert stats[name][SMALL_POOL].current == 0
    stats.on_free(LARGE, 4096)
    assert stats.allocated_bytes[AGGREGATE].current == 0 and stats.active[AGGREGATE].current == 1
    stats.on_free_block(LARGE, 4096, 4000, net_inactive_split=1, net_inactive_split_bytes=4096)
    assert stats.active_bytes[LARGE_POOL].current == 0 and stats.active_bytes[LARGE_POOL].peak == 4096
    assert stats.inactive_split[LARGE_POOL].current == stats.inactive_split_bytes[AGGREGATE].current // 4096 == 1


def test_stat_arrays_by_name_are_the_attributes_and_a_wrong_name_says_which_exist():
    stats = DeviceStats()
    assert stats["segment"] is stats.segment and list(stats.arrays) == [
        "allocation", "segment", "active", "inactive_split", "allocated_bytes",
        "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"]
    with pytest.raises(KeyError, match="requested_bytes"):
        stats["requested"]
    assert len(stats.as_flat_dict()) == 122


def test_freed_is_the_running_total_of_decreases_through_any_sequence_and_resets():
    """``freed`` is derived (RMM's counter keeps value, peak, total); check it against PyTorch's
    stored running total over random moves and resets, with peak and allocated alongside."""
    import random
    rng = random.Random(7)
    s = Stat()
    current = peak = allocated = freed = 0
    for _ in range(5000):
        roll = rng.random()
        if roll < 0.5:
            n = rng.randrange(1, 1 << 40)
            s.increase(n)
            current, allocated = current + n, allocated + n
            peak = max(peak, current)
        elif roll < 0.95 and current:
            n = rng.randrange(1, current + 1)
            s.decrease(n)
            current, freed = current - n, freed + n
        elif roll < 0.975:
            s.reset_accumulated()
            allocated = freed = 0
        else:
            s.reset_peak()
            peak = current
        assert (s.current, s.peak, s.allocated, s.freed) == (current, peak, allocated, freed)
    assert repr(s) == f"Stat(current={current}, peak={peak}, allocated={allocated}, freed={freed})"
