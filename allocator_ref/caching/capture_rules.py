"""What the caching allocator does differently while a CUDA graph is being captured.

Mirrors, in ``c10/cuda/CUDACachingAllocator.cpp`` (2.11), the capture branches of
``malloc`` / ``free`` / ``recordStream`` / ``endAllocateToPool`` and the helpers
``cudaMallocMaybeCapturing``, ``allocPrimitive``, ``insert_events_deferred_until_no_capture``,
``remove_cudagraph_stream_uses``, ``record_free_markers``, ``update_visited`` and
``free_safe_blocks_in_capture``.  The rules (see Note [Interaction with CUDA graph capture]):

1. ``process_events`` is skipped: ``cudaEventQuery`` is illegal during capture.
2. A block freed with uses on other streams (``record_stream``) cannot get events;
   it waits in ``deferred_blocks`` until the next ``process_events`` after capture.
   With ``graph_capture_record_stream_reuse:True`` it records the capture's terminal
   nodes as "free markers" and is freed *during* capture as soon as every later
   node provably comes after them (the graph's topology, no event query needed).
3. ``release_cached_blocks`` is not tried in the OOM ladder (it synchronizes).
4. ``cudaMalloc`` runs with the thread's capture mode exchanged to *relaxed*.
5. Uses recorded during capture (``block_to_cudagraph_stream_uses``) are dropped
   when the deferred free is finally processed: the capture ended, so the graph's
   work on those streams is complete.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Optional

from ..device.errors import CudaOutOfMemoryError


class CaptureRulesMixin:
    """The capture rules, mixed into CachingAllocator."""

    def _init_capture_rules(self) -> None:
        self.deferred_blocks: dict = {}                  # block -> free markers (graph nodes)
        self.block_to_cudagraph_stream_uses: dict = {}   # block -> streams recorded during capture
        self.graph_reuse_context: dict = {}              # capture id -> {stream handle: visited nodes}
        self.mempool_to_capture_id: dict = {}

    # ----------------------------------------------------------- device calls
    def _capture_info(self, stream: Any):
        """``stream_get_capture_info`` (None on a device that cannot capture)."""
        info = getattr(self.device, "capture_info", None)
        return info(stream) if info is not None else None

    def cuda_malloc_maybe_capturing(self, size: int, pool: Any) -> Optional[int]:
        """``cudaMallocMaybeCapturing`` + ``allocPrimitive``: the pointer, or None when out of memory.

        A custom-allocator pool asks its allocator (``raw_alloc``); a stream that is
        capturing gets ``cudaMalloc`` in relaxed capture mode (new addresses, not a graph node).
        """
        owner = pool.owner_PrivatePool
        capturing = self.captures_underway and getattr(self.device, "is_capturing", None) is not None \
            and self.device.is_capturing()
        guard = self.device.capture_mode("relaxed") if capturing else nullcontext()
        with guard:
            if owner is not None and owner.allocator is not None:
                return owner.allocator.raw_alloc(size)
            try:
                return self.device.malloc(size)
            except CudaOutOfMemoryError:
                return None

    def cuda_free(self, ptr: int, pool: Any) -> None:
        """``release_block``'s cudaFree, or the custom allocator's ``raw_delete``."""
        owner = pool.owner_PrivatePool
        if owner is not None and owner.allocator is not None:
            owner.allocator.raw_delete(ptr)
        else:
            self.device.free(ptr)

    # -------------------------------------------------------------- the rules
    def before_malloc_in_capture(self, stream: Any, context: Optional[list] = None) -> None:
        """``malloc`` with captures underway: no process_events; maybe free_safe_blocks_in_capture."""
        if self.config.graph_capture_record_stream_reuse:
            self.free_safe_blocks_in_capture(context, stream)

    def defer_free_during_capture(self, block: Any) -> None:
        """``free`` of a block with stream uses while capturing: hold it back (rule 2)."""
        markers = self.record_free_markers(block) if self.config.graph_capture_record_stream_reuse else []
        self.deferred_blocks[block] = markers

    def remove_cudagraph_stream_uses(self, block: Any) -> None:
        """``remove_cudagraph_stream_uses``: forget the uses recorded during capture (rule 5)."""
        during = self.block_to_cudagraph_stream_uses.pop(block, None)
        if during:
            block.stream_uses = {s for s in block.stream_uses if s not in during}

    def insert_events_deferred_until_no_capture(self, context: Optional[list] = None) -> None:
        """``insert_events_deferred_until_no_capture``: events for the frees a capture held back."""
        deferred, self.deferred_blocks = self.deferred_blocks, {}
        for block in deferred:
            self.remove_cudagraph_stream_uses(block)
            self.insert_events(block)
            if block.event_count == 0:
                self.free_block(block, context)

    # ------------------------------------------- graph_capture_record_stream_reuse
    def record_free_markers(self, block: Any) -> list:
        """``record_free_markers``: the terminals of every stream that used the block, or [] if
        one of them is not capturing (then the free waits for the capture to end)."""
        markers, graph = [], None
        for stream in [block.stream, *sorted(block.stream_uses, key=lambda s: s.handle)]:
            info = self._capture_info(stream)
            if info is None or info.status != "active":
                return []
            if graph is None:
                graph = info.graph
            elif info.graph is not graph:
                raise RuntimeError("All streams in the same capture should agree on the graph")
            markers.extend(n for n in info.terminals if n not in markers)
        return markers

    def free_safe_blocks_in_capture(self, context: Optional[list], stream: Any) -> None:
        """``free_safe_blocks_in_capture``: free deferred blocks of this stream whose every free
        marker is an ancestor of the stream's current terminals (so all later work follows them)."""
        info = self._capture_info(stream)
        if info is None or info.status != "active" or not info.terminals:
            return
        if info.capture_id not in self.graph_reuse_context:
            for pool_id, accepts in reversed(self.captures_underway):
                if accepts(stream):
                    self.graph_reuse_context[info.capture_id] = {}
                    self.mempool_to_capture_id[pool_id] = info.capture_id
                    break
            else:
                raise RuntimeError("Could not find memory pool id for capture.")
        visited = self.graph_reuse_context[info.capture_id].setdefault(stream.handle, set())
        update_visited(info.terminals, visited)
        for block, markers in list(self.deferred_blocks.items()):
            if not markers or block.stream is not stream:
                continue
            if all(m in visited for m in markers):
                block.stream_uses = set()      # the graph orders the uses; no events needed
                self.free_block(block, context)
                del self.deferred_blocks[block]

    def _end_capture_reuse(self, pool_id: tuple) -> None:
        """``endAllocateToPool``'s reuse half: the capture is over, so its deferred blocks
        can be freed now (pre-capture uses still get events)."""
        if not self.config.graph_capture_record_stream_reuse:
            return
        capture_id = self.mempool_to_capture_id.pop(pool_id, None)
        self.graph_reuse_context.pop(capture_id, None)
        pool = self.graph_pools.get(pool_id)
        if pool is None or not self.deferred_blocks:
            return
        for block in [b for b in self.deferred_blocks if b.pool.owner_PrivatePool is pool]:
            del self.deferred_blocks[block]
            self.remove_cudagraph_stream_uses(block)
            if block.stream_uses:
                self.insert_events(block)
                if block.event_count == 0:
                    self.free_block(block)
            else:
                self.free_block(block)


def update_visited(terminals, visited: set) -> None:
    """``update_visited``: reverse DFS from the terminals, never re-walking a visited node."""
    todo = list(terminals)
    while todo:
        node = todo.pop()
        if node in visited:
            continue
        visited.add(node)
        todo.extend(node.parents)
