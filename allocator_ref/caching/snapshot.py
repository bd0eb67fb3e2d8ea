"""``torch.cuda.memory._snapshot()`` for the reference allocator, and PyTorch's stats/snapshot check.

Mirrors ``DeviceCachingAllocator::snapshot`` and the dict built by
``THCPModule_memorySnapshot``, and the invariant of
``test_cuda_multigpu.py::_check_memory_stat_consistency``.
"""
from __future__ import annotations


def block_state(block) -> str:
    if block.allocated:
        return "active_allocated"
    if block.event_count > 0 or block.stream_uses:
        return "active_pending_free"      # freed by the user, waiting for other streams' events
    return "inactive"


class SnapshotMixin:
    """``snapshot()`` and friends, mixed into CachingAllocator."""

    def _all_blocks(self, mempool_id: tuple = (0, 0)):
        """``get_all_blocks``: free blocks of every pool and every active block (all mapped);
        for a private pool's id, only that pool's segment heads (``get_private_pool_head_blocks``)."""
        if mempool_id != (0, 0):
            yield from self._private_pool_head_blocks(mempool_id)
            return
        yield from self.small_blocks
        yield from self.large_blocks
        yield from self._private_pool_blocks()
        yield from self.active_blocks.values()

    def segments(self, record: bool = True, mempool_id: tuple = (0, 0)) -> list[dict]:
        """The ``segments`` list: one entry per segment (per contiguous mapped range if expandable).

        Like PyTorch, taking a snapshot is itself a trace event (``snapshot``); pictures that
        look at the allocator after every event pass ``record=False`` to leave history alone.
        """
        result = []
        total_active = 0
        for head in self._all_blocks(tuple(mempool_id)):
            if head.prev is not None and head.prev.mapped:
                continue
            segment = {
                "device": self.device.info.index, "address": head.ptr, "total_size": 0,
                "allocated_size": 0, "active_size": 0, "requested_size": 0,
                "stream": head.stream_key,
                "segment_type": "small" if head.pool.is_small else "large",
                "segment_pool_id": head.pool.owner_id,
                "is_expandable": head.expandable_segment is not None,
                "frames": list(head.segment_frames), "blocks": [],
            }
            block = head
            while block is not None and block.mapped:
                state = block_state(block)
                segment["blocks"].append({"address": block.ptr, "size": block.size,
                                          "requested_size": block.requested_size,
                                          "state": state, "frames": list(block.frames)})
                segment["total_size"] += block.size
                if block.allocated:
                    segment["allocated_size"] += block.size
                if state != "inactive":
                    segment["active_size"] += block.size
                    segment["requested_size"] += block.requested_size
                block = block.next
            total_active += segment["active_size"]
            result.append(segment)
        result.sort(key=lambda s: s["address"])
        if record:
            self._record("snapshot", 0, total_active, 0)
        return result

    def snapshot(self) -> dict:
        """The whole dict: segments, device_traces, allocator_settings, external_annotations."""
        # NativeCachingAllocator::snapshot copies the trace (da->trace) before
        # DeviceCachingAllocator::snapshot records its SNAPSHOT entry: that entry shows
        # only in the next snapshot.
        traces = [self.trace.dicts()]
        segments = self.segments()
        return {
            "segments": segments,
            "device_traces": traces,
            "allocator_settings": self.config.settings_dict(),
            "external_annotations": [],
        }


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
