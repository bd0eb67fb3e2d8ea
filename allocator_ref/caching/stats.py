"""Allocator statistics, exactly as ``torch.cuda.memory_stats()`` reports them.

Mirrors ``c10::CachingDeviceAllocator::{Stat, StatArray, DeviceStats}``
(spec section 6).  A :class:`Stat` keeps four numbers:

* ``current`` -- what is in use now,
* ``peak``    -- the highest ``current`` since the last ``reset_peak``,
* ``allocated`` / ``freed`` -- running totals of increases / decreases.

Most stats come in three flavours, ``all`` (AGGREGATE), ``small_pool`` and
``large_pool``: a :class:`StatArray`.  ``memory_stats()`` flattens the nested
dict with dots and sorts the keys, giving PyTorch 2.11's 122 keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field

AGGREGATE, SMALL_POOL, LARGE_POOL = 0, 1, 2
STAT_TYPE_NAMES = ("all", "small_pool", "large_pool")

# The StatArrays of DeviceStats, in the order PyTorch declares them.
STAT_ARRAYS = (
    "allocation", "segment", "active", "inactive_split", "allocated_bytes",
    "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes",
)
SINGLE_STATS = ("oversize_allocations", "oversize_segments")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams",
            "num_device_alloc", "num_device_free")


@dataclass
class Stat:
    current: int = 0
    peak: int = 0
    allocated: int = 0
    freed: int = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.peak = max(self.peak, self.current)
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0

    def reset_peak(self) -> None:
        self.peak = self.current

    def as_dict(self) -> dict:
        return {"current": self.current, "peak": self.peak,
                "allocated": self.allocated, "freed": self.freed}


def _stat_array() -> list[Stat]:
    return [Stat(), Stat(), Stat()]


@dataclass
class DeviceStats:
    """All the numbers one device's allocator keeps (``c10::CachingDeviceAllocator::DeviceStats``)."""

    arrays: dict = field(default_factory=lambda: {name: _stat_array() for name in STAT_ARRAYS})
    oversize_allocations: Stat = field(default_factory=Stat)
    oversize_segments: Stat = field(default_factory=Stat)
    num_alloc_retries: int = 0
    num_ooms: int = 0
    num_sync_all_streams: int = 0
    num_device_alloc: int = 0
    num_device_free: int = 0
    max_split_size: int = -1   # frozen at construction; SIZE_MAX is reported as -1

    def __getitem__(self, name: str) -> list[Stat]:
        return self.arrays[name]

    # PyTorch updates a stat for AGGREGATE and for the block's pool together
    # (``for_each_selected_stat_type``): these two helpers do exactly that.
    # Stat.increase/decrease written out inline: these run ~10 times per malloc+free pair,
    # and the call overhead was a third of the allocator's warm path (benchmarks/bench_warm_path.py).
    def increase(self, name: str, pool_type: int, amount: int) -> None:
        array = self.arrays[name]
        for stat in (array[AGGREGATE], array[pool_type]):
            current = stat.current + amount
            stat.current = current
            stat.allocated += amount
            if current > stat.peak:
                stat.peak = current

    def decrease(self, name: str, pool_type: int, amount: int) -> None:
        array = self.arrays[name]
        for stat in (array[AGGREGATE], array[pool_type]):
            stat.current -= amount
            stat.freed += amount

    # The three places PyTorch touches several stats at once, each as one call: they sit on
    # the warm path (a malloc+free pair), where every Python call shows in the benchmark.
    def count_allocation(self, pool_type: int, block_size: int, requested: int) -> None:
        """``alloc_found_block``: allocation, allocated_bytes, active, active_bytes, requested_bytes."""
        arrays = self.arrays
        for name, amount in (("allocation", 1), ("allocated_bytes", block_size), ("active", 1),
                             ("active_bytes", block_size), ("requested_bytes", requested)):
            array = arrays[name]
            for stat in (array[AGGREGATE], array[pool_type]):
                current = stat.current + amount
                stat.current = current
                stat.allocated += amount
                if current > stat.peak:
                    stat.peak = current

    def count_free_request(self, pool_type: int, block_size: int) -> None:
        """``free``: allocation and allocated_bytes drop when the user frees."""
        for name, amount in (("allocation", 1), ("allocated_bytes", block_size)):
            array = self.arrays[name]
            for stat in (array[AGGREGATE], array[pool_type]):
                stat.current -= amount
                stat.freed += amount

    def count_free_completed(self, pool_type: int, block_size: int, requested: int) -> None:
        """``free_block``: active, active_bytes and requested_bytes drop when the memory is back."""
        for name, amount in (("active", 1), ("active_bytes", block_size), ("requested_bytes", requested)):
            array = self.arrays[name]
            for stat in (array[AGGREGATE], array[pool_type]):
                stat.current -= amount
                stat.freed += amount

    def reset_accumulated(self) -> None:
        """``resetAccumulatedStats``: zero allocated/freed totals and the five counters."""
        for array in self.arrays.values():
            for stat in array:
                stat.reset_accumulated()
        self.oversize_allocations.reset_accumulated()
        self.oversize_segments.reset_accumulated()
        for name in COUNTERS:
            setattr(self, name, 0)

    def reset_peak(self) -> None:
        """``resetPeakStats``: every peak drops to its current value."""
        for array in self.arrays.values():
            for stat in array:
                stat.reset_peak()
        self.oversize_allocations.reset_peak()
        self.oversize_segments.reset_peak()

    def as_flat_dict(self) -> dict:
        """The dict ``torch.cuda.memory_stats()`` returns: dotted keys, sorted (122 of them)."""
        flat = {}
        for name, array in self.arrays.items():
            for type_name, stat in zip(STAT_TYPE_NAMES, array):
                for metric, value in stat.as_dict().items():
                    flat[f"{name}.{type_name}.{metric}"] = value
        for name in SINGLE_STATS:
            for metric, value in getattr(self, name).as_dict().items():
                flat[f"{name}.{metric}"] = value
        for name in COUNTERS:
            flat[name] = getattr(self, name)
        flat["max_split_size"] = self.max_split_size
        return dict(sorted(flat.items()))
