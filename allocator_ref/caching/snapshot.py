"""Block states of a snapshot, and PyTorch's stats/snapshot check.

``snapshot()`` itself (``DeviceCachingAllocator::snapshot`` and the dict built by
``THCPModule_memorySnapshot``) is ``DeviceCachingAllocator.snapshot`` (device_caching_allocator.py)
and ``CachingAllocator.snapshot`` (allocator.py).  This
file keeps ``block_state`` and the invariant of
``test_cuda_multigpu.py::_check_memory_stat_consistency``.
"""
from __future__ import annotations


def block_state(block) -> str:
    if block.allocated:
        return "active_allocated"
    if block.event_count > 0 or block.stream_uses:
        return "active_pending_free"      # freed by the user, waiting for other streams' events
    return "inactive"


def check_stats_consistency(segments: list[dict], stats: dict) -> None:
    """PyTorch's ``_check_memory_stat_consistency``: stats must equal what the snapshot shows.

    Raises AssertionError naming the first stat that disagrees.
    """
    expected = {}
    for pool in ("all", "large_pool", "small_pool"):
        for name in ("segment", "allocated_bytes", "reserved_bytes", "active_bytes",
                     "requested_bytes", "allocation", "active", "inactive_split",
                     "inactive_split_bytes"):
            expected[f"{name}.{pool}.current"] = 0
    for segment in segments:
        for pool in ("all", segment["segment_type"] + "_pool"):
            add = lambda name, n: expected.__setitem__(f"{name}.{pool}.current",
                                                       expected[f"{name}.{pool}.current"] + n)
            if not segment["is_expandable"]:
                add("segment", 1)
            add("allocated_bytes", segment["allocated_size"])
            add("reserved_bytes", segment["total_size"])
            add("active_bytes", segment["active_size"])
            add("requested_bytes", segment["requested_size"])
            blocks = segment["blocks"]
            split = len(blocks) > 1 and not segment["is_expandable"]
            for block in blocks:
                if block["state"] == "active_allocated":
                    add("allocation", 1)
                if block["state"].startswith("active_"):
                    add("active", 1)
                if block["state"] == "inactive" and split:
                    add("inactive_split", 1)
                    add("inactive_split_bytes", block["size"])
    for key, value in expected.items():
        if stats[key] != value:
            raise AssertionError(f"memory_stats()['{key}'] = {stats[key]} but the snapshot adds up to {value}")
