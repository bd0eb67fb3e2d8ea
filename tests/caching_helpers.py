"""Shared fixtures and independent checks for the caching-allocator tests.

Everything here is restated from PyTorch (each item names what); none of it
calls the allocator's own helpers to compute an expected value.

* ``make_alloc(conf, profile)`` -- a fresh ``CachingAllocator`` on a fresh
  ``SimDevice``; every allocator made is checked for stats/snapshot
  consistency when the test ends.
* ``assert_consistent(a)`` -- ``TestCudaMultiGPU._check_memory_stat_consistency``
  (test/test_cuda_multigpu.py) restated from the ``segments`` list, plus the structural invariants (blocks
  tile each segment exactly, no two free neighbours in a non-expandable
  segment, segments never overlap).
* ``fmt_size`` -- ``format_size``, the size printer of CUDACachingAllocator.cpp's
  messages, restated.
"""
from __future__ import annotations

import pytest

import allocator_ref as ar
from allocator_ref.device import SimDevice

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB

POOLS = ("all", "large_pool", "small_pool")
CURRENT_KEYS = ("segment", "allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                "allocation", "active", "inactive_split", "inactive_split_bytes")


def new_device(profile: str = "h100-80gb") -> SimDevice:
    return SimDevice(profile)


@pytest.fixture
def make_alloc():
    """Factory: ``make_alloc(conf="", profile="h100-80gb") -> CachingAllocator`` on a new SimDevice."""
    made = []

    def factory(conf: str = "", profile: str = "h100-80gb", device=None):
        dev = device if device is not None else new_device(profile)
        a = ar.CachingAllocator(dev, conf)
        made.append(a)
        return a

    yield factory
    for a in made:
        assert_consistent(a)
    for a in made:
        try:
            a.device.close()
        except Exception:
            pass


def stats(a) -> dict:
    return a.memory_stats()


def cur(a, name: str, pool: str = "all") -> int:
    return a.memory_stats()[f"{name}.{pool}.current"]


def stat_delta(before: dict, after: dict) -> dict:
    """Keys whose value changed, as {key: after - before}."""
    return {k: after[k] - before[k] for k in after if after[k] != before.get(k)}


def fmt_size(size: int) -> str:
    """PyTorch's format_size: <=1024 bytes; <=1 MiB KiB; <=1 GiB MiB; else GiB (2 decimals)."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= MiB:
        return f"{size / KiB:.2f} KiB"
    if size <= GiB:
        return f"{size / MiB:.2f} MiB"
    return f"{size / GiB:.2f} GiB"


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def check_segments(segments: list[dict], stats_dict: dict) -> None:
    """_check_memory_stat_consistency (test/test_cuda_multigpu.py) restated, independently of
    allocator_ref.caching.check_stats_consistency, plus the invariants of Block's prev/next
    links in CUDACachingAllocator.cpp (blocks tile a segment; split, free and merge keep it so)."""
    expected = {f"{n}.{p}.current": 0 for n in CURRENT_KEYS for p in POOLS}
    ranges = []
    for seg in segments:
        pools = ("all", seg["segment_type"] + "_pool")
        blocks = seg["blocks"]
        assert blocks, f"segment at {seg['address']:#x} has no blocks"
        # blocks tile the segment exactly, in address order
        addr = seg["address"]
        for b in blocks:
            assert b["address"] == addr, f"gap/overlap in segment {seg['address']:#x} at {addr:#x}"
            assert b["size"] > 0
            addr += b["size"]
        assert addr - seg["address"] == seg["total_size"] == sum(b["size"] for b in blocks)
        assert seg["allocated_size"] == sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        assert seg["active_size"] == sum(b["size"] for b in blocks if b["state"].startswith("active_"))
        assert seg["requested_size"] == sum(b["requested_size"] for b in blocks
                                            if b["state"].startswith("active_"))
        if not seg["is_expandable"]:
            for left, right in zip(blocks, blocks[1:]):
                assert not (left["state"] == "inactive" and right["state"] == "inactive"), \
                    f"two free neighbours at {left['address']:#x} and {right['address']:#x}"
        ranges.append((seg["address"], seg["address"] + seg["total_size"]))
        split = len(blocks) > 1 and not seg["is_expandable"]
        for p in pools:
            e = lambda n, v: expected.__setitem__(f"{n}.{p}.current", expected[f"{n}.{p}.current"] + v)
            e("segment", 0 if seg["is_expandable"] else 1)
            e("allocated_bytes", seg["allocated_size"])
            e("reserved_bytes", seg["total_size"])
            e("active_bytes", seg["active_size"])
            e("requested_bytes", seg["requested_size"])
            e("allocation", sum(1 for b in blocks if b["state"] == "active_allocated"))
            e("active", sum(1 for b in blocks if b["state"].startswith("active_")))
            if split:
                e("inactive_split", sum(1 for b in blocks if b["state"] == "inactive"))
                e("inactive_split_bytes", sum(b["size"] for b in blocks if b["state"] == "inactive"))
    ranges.sort()
    for (s0, e0), (s1, _e1) in zip(ranges, ranges[1:]):
        assert e0 <= s1, f"segments overlap: [{s0:#x},{e0:#x}) and {s1:#x}"
    mismatches = {k: (stats_dict[k], v) for k, v in expected.items() if stats_dict[k] != v}
    assert not mismatches, f"memory_stats vs snapshot (got, expected): {mismatches}"
    for p in POOLS:
        assert stats_dict[f"reserved_bytes.{p}.current"] >= stats_dict[f"allocated_bytes.{p}.current"]
        assert stats_dict[f"active_bytes.{p}.current"] >= stats_dict[f"allocated_bytes.{p}.current"]


def assert_consistent(a) -> None:
    """The invariant, by the independent restatement and by the package's own checker."""
    segments = a.segments()
    st = a.memory_stats()
    check_segments(segments, st)
    ar.check_stats_consistency(segments, st)


def seg_blocks(a, address=None) -> list[tuple[int, str]]:
    """[(size, state)] of the (only, or given) segment."""
    segs = a.segments()
    if address is not None:
        segs = [s for s in segs if s["address"] == address]
    assert len(segs) == 1, f"expected one segment, got {len(segs)}"
    return [(b["size"], b["state"]) for b in segs[0]["blocks"]]


def trace_of(a) -> list[dict]:
    return a.snapshot()["device_traces"][0]


def actions(entries, drop=("snapshot",)) -> list[tuple]:
    """(action, addr-or-device_free, size) of each entry, without snapshot markers."""
    out = []
    for e in entries:
        if e["action"] in drop:
            continue
        out.append((e["action"], e.get("addr", e.get("device_free")), e["size"]))
    return out


class Recorder:
    """Collects trace events through ``a.trace.add_listener`` (sees them even with history off)."""

    def __init__(self, a):
        self.events = []
        self.stop = a.trace.add_listener(self.events.append)

    def simple(self, drop=("snapshot",)):
        return [(e.action, e.addr, e.size) for e in self.events if e.action not in drop]
