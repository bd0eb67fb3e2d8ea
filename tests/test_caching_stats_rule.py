"""The current/peak/allocated/freed rule is written once (``Stat.increase`` / ``Stat.decrease``,
RMM's counter) and every bundle goes through it, indexed by named stat types."""
from __future__ import annotations

from allocator_ref.caching.stats import AGGREGATE, LARGE_POOL, SMALL_POOL, DeviceStats, Stat


def test_peak_follows_current_up_never_down():
    s = Stat()
    s.increase(5), s.decrease(3), s.increase(2)
    assert (s.current, s.peak, s.allocated, s.freed) == (4, 5, 7, 3)


def test_every_bundle_moves_stats_through_the_one_rule(monkeypatch):
    moves = []
    monkeypatch.setattr(Stat, "increase", lambda self, amount: moves.append(("+", amount)))
    monkeypatch.setattr(Stat, "decrease", lambda self, amount: moves.append(("-", amount)))
    stats = DeviceStats()
    stats.on_alloc_found_block(SMALL_POOL, 1024, 1000)
    stats.on_free(SMALL_POOL, 1024)
    stats.on_free_block(SMALL_POOL, 1024, 1000)
    # five stats up, two down, three down: each for AGGREGATE and the pool
    assert [m[0] for m in moves] == ["+"] * 10 + ["-"] * 4 + ["-"] * 6
    assert sorted(a for sign, a in moves if sign == "+") == sorted([1, 1, 1024, 1024, 1, 1, 1024, 1024, 1000, 1000])


def test_bundles_touch_aggregate_and_the_pool_only():
    stats = DeviceStats()
    stats.on_alloc_found_block(LARGE_POOL, 4096, 4000)
    for name, amount in (("allocation", 1), ("allocated_bytes", 4096), ("active", 1),
                         ("active_bytes", 4096), ("requested_bytes", 4000)):
        assert stats[name][AGGREGATE].current == stats[name][LARGE_POOL].current == amount
        assert stats[name][SMALL_POOL].current == 0
    stats.on_free(LARGE_POOL, 4096)
    assert stats["allocated_bytes"][AGGREGATE].current == 0 and stats["active"][AGGREGATE].current == 1
    stats.on_free_block(LARGE_POOL, 4096, 4000)
    assert stats["active_bytes"][LARGE_POOL].current == 0 and stats["active_bytes"][LARGE_POOL].peak == 4096
