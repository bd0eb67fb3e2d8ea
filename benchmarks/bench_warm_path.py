"""Warm-path cost of the caching allocator against the floor of its ordered container.

A cache hit costs, on the free-list side, one lower-bound search (malloc's best
fit), taking that block out of the pool, and putting it back (free).  Through
``SortedList``'s public API that is ``bisect_left`` + ``remove`` + ``add`` on a list
of the same length: the *floor* the target is set against.  ``BlockPool`` does the
same three steps through SortedList's internals (``lower_bound`` bisects
``_maxes`` and one sublist, and ``erase`` deletes at the position found, as
PyTorch's ``blocks.erase(it)`` does, instead of searching again), so the report
also gives that *internal floor*: the pair minus it is what the allocator's own
Python bookkeeping costs (stats, checks, the Allocation handed out).

The benchmark fills the large pool with N free blocks of distinct sizes (all
carved from one big cached segment and kept apart by allocated spacers so they
cannot merge), then times malloc+free pairs of sizes that hit the cache exactly
(no split, no merge), and both floors on a copy of the pool's list, in the same run.

Targets (reported, not asserted): pair <= 3x the floor at the largest N, and
<= 1.5x growth of the pair cost from 100 to 100,000 cached blocks.
"""
from __future__ import annotations

import dataclasses
import gc
import time
from bisect import bisect_left as bisect_left_list
from typing import Optional, Sequence

from sortedcontainers import SortedList

from allocator_ref.caching import CachingAllocator
from allocator_ref.device import SimDevice

from .common import write_result

MiB = 1 << 20
SPACER = 2 * MiB
FULL_COUNTS = (100, 10_000, 100_000)
QUICK_COUNTS = (100, 1_000, 5_000)
TARGET_RATIO = 3.0
TARGET_GROWTH = 1.5


def block_size(i: int) -> int:
    """The i-th cached block: large pool (> 1 MiB), distinct, already a 512 B multiple."""
    return MiB + 512 * (i + 1)


def filled_allocator(n_blocks: int):
    """A caching allocator whose large pool holds ``n_blocks`` free blocks of distinct sizes."""
    need = sum(block_size(i) for i in range(n_blocks)) + n_blocks * SPACER + 64 * MiB
    dev = SimDevice("h200-141gb")
    # A big simulated device: capacity only (LazyPages stores nothing until written).
    dev.info = dataclasses.replace(dev.info, total_memory=need + dev.info.context_reserve + (1 << 30))
    alloc = CachingAllocator(dev)
    alloc.free(alloc.malloc(need))             # one cached segment to carve from
    holes, spacers = [], []
    for i in range(n_blocks):
        holes.append(alloc.malloc(block_size(i)))
        spacers.append(alloc.malloc(SPACER))   # keeps the hole from merging with its neighbours
    for a in holes:
        alloc.free(a)
    return alloc, dev, spacers


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        best = min(best, fn())
    return best


class _Case:
    """One filled allocator and its floor list, ready to be timed again and again."""

    def __init__(self, n_blocks: int, pairs: int) -> None:
        self.n_blocks, self.pairs = n_blocks, pairs
        self.alloc, self.dev, self._spacers = filled_allocator(n_blocks)
        pool = self.alloc.device_allocator.large_blocks
        self.pool = pool
        self.free_blocks = len(pool)         # n_blocks holes + the tail of the big segment
        # Sizes that hit exactly, spread over the list (so the bisect walks different paths).
        picks = [block_size(i) for i in range(0, n_blocks, max(1, n_blocks // 16))][:16]
        self.sizes = [picks[k % len(picks)] for k in range(pairs)]
        # Floor: the same three SortedList operations on a list of the same entries.
        self.floor_list = SortedList(list(pool.blocks))
        self.stream_key = pool.blocks[0][0]
        by_size = {}
        for entry in self.floor_list:
            by_size.setdefault(entry[1], entry)
        self.floor_keys = [(s, by_size[s]) for s in self.sizes]
        self.pair_ns: list = []
        self.floor_ns: list = []
        self.internal_ns: list = []

    def time_pairs(self) -> None:
        malloc, free, stream = self.alloc.malloc, self.alloc.free, self.dev.default_stream
        t0 = time.perf_counter_ns()
        for s in self.sizes:
            free(malloc(s, stream))
        self.pair_ns.append((time.perf_counter_ns() - t0) / self.pairs)

    def time_floor(self) -> None:
        fl, key = self.floor_list, self.stream_key
        bisect_left, remove, add = fl.bisect_left, fl.remove, fl.add
        t0 = time.perf_counter_ns()
        for s, entry in self.floor_keys:
            bisect_left((key, s, 0))
            remove(entry)
            add(entry)
        self.floor_ns.append((time.perf_counter_ns() - t0) / self.pairs)

    def time_floor_internal(self) -> None:
        """The same three steps the way BlockPool takes them: bisect _maxes and one sublist, delete there, add."""
        fl, key = self.floor_list, self.stream_key
        maxes, lists, delete, add = fl._maxes, fl._lists, fl._delete, fl.add
        t0 = time.perf_counter_ns()
        for s, entry in self.floor_keys:
            probe = (key, s, 0)
            sublist = bisect_left_list(maxes, probe)
            index = bisect_left_list(lists[sublist], probe)
            delete(sublist, index)
            add(entry)
        self.internal_ns.append((time.perf_counter_ns() - t0) / self.pairs)

    def result(self, rounds: int) -> dict:
        assert len(self.pool) == self.free_blocks, "the warm path must neither split nor merge"
        pair, floor, internal = min(self.pair_ns), min(self.floor_ns), min(self.internal_ns)
        return {
            "cached_blocks": self.n_blocks,
            "pool_free_blocks": self.free_blocks,
            "pairs_timed": self.pairs,
            "rounds": rounds,
            "pair_ns": pair,
            "floor_ns": floor,
            "pair_ns_median": sorted(self.pair_ns)[len(self.pair_ns) // 2],
            "floor_ns_median": sorted(self.floor_ns)[len(self.floor_ns) // 2],
            "ratio_to_floor": pair / floor,
            "floor_internal_ns": internal,
            "bookkeeping_ns": pair - internal,
        }

    def close(self) -> None:
        self.dev.close()


def measure_all(counts: Sequence[int], pairs: int, rounds: int) -> list:
    """Best of ``rounds``; the rounds interleave every size and the floor, so drift hits all alike."""
    cases = [_Case(n, pairs) for n in counts]
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for case in cases:                                  # warm up
            case.time_pairs(), case.time_floor(), case.time_floor_internal()
            case.pair_ns.clear(), case.floor_ns.clear(), case.internal_ns.clear()
        for _ in range(rounds):
            for case in cases:
                case.time_pairs()
                case.time_floor()
                case.time_floor_internal()
    finally:
        if gc_was:
            gc.enable()
    rows = [case.result(rounds) for case in cases]
    for case in cases:
        case.close()
    return rows


def measure(n_blocks: int, pairs: int = 2000, repeats: int = 5) -> dict:
    """One size on its own (for notebooks and quick looks)."""
    return measure_all([n_blocks], pairs, repeats)[0]


def run(quick: bool = False, counts: Optional[Sequence[int]] = None, out_dir=None) -> dict:
    counts = tuple(counts or (QUICK_COUNTS if quick else FULL_COUNTS))
    pairs, rounds = (500, 3) if quick else (2000, 15)
    t0 = time.perf_counter()
    rows = measure_all(counts, pairs, rounds)
    for n, row in zip(counts, rows):
        print(f"[warm_path] {n:>7} cached blocks: malloc+free {row['pair_ns'] / 1000:7.2f} us, "
              f"floor {row['floor_ns'] / 1000:6.2f} us, ratio {row['ratio_to_floor']:.2f}x "
              f"(internal floor {row['floor_internal_ns'] / 1000:.2f} us)", flush=True)
    first, last = rows[0], rows[-1]
    ratio = last["ratio_to_floor"]
    growth = last["pair_ns"] / first["pair_ns"]
    payload = {
        "quick": quick,
        "counts": list(counts),
        "rows": rows,
        # Named for the full run's sizes; in --quick mode they use the largest/smallest counts measured.
        "ratio_to_floor": ratio,
        "growth_100_to_100000": growth,
        "floor_growth": last["floor_ns"] / first["floor_ns"],
        "pairs_per_round": pairs,
        "rounds": rounds,
        "targets": {
            "ratio_to_floor": {"target": f"<= {TARGET_RATIO}x", "value": ratio, "pass": ratio <= TARGET_RATIO},
            "growth_100_to_100000": {"target": f"<= {TARGET_GROWTH}x", "value": growth,
                                     "pass": growth <= TARGET_GROWTH},
        },
        "floor_definition": "SortedList.bisect_left + remove + add on a copy of the pool's list, same run",
        "floor_internal_definition": "bisect _maxes and one sublist, _delete there, add (BlockPool's own "
                                     "lower_bound + erase + insert), same list, same run",
        "elapsed_s": time.perf_counter() - t0,
    }
    write_result("warm_path", payload, out_dir)
    return payload


if __name__ == "__main__":
    run()
