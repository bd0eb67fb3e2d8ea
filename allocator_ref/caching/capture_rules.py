"""What the caching allocator does differently while a CUDA graph is being captured.

The code is in ``DeviceCachingAllocator`` (device_caching_allocator.py), as in PyTorch where these are
its members; this file lists the rules and keeps two plain functions, ``update_visited`` and
``stream_get_capture_info``.  They mirror, in ``c10/cuda/CUDACachingAllocator.cpp``
(2.11), the capture branches of
``malloc`` / ``free`` / ``recordStream`` / ``endAllocateToPool`` and the helpers
``cudaMallocMaybeCapturing``, ``allocPrimitive``, ``insert_events_deferred_until_no_capture``,
``remove_cudagraph_stream_uses``, ``record_free_markers``, ``update_visited`` and
``free_safe_blocks_in_capture``.  The rules (see Note [Interaction with CUDA graph capture]).

"While capturing" means "while ``captures_underway`` is not empty": PyTorch 2.11 asks nothing
else, and ``use_mem_pool`` puts its pool there too (``beginAllocateToPool``), so every rule but 4
applies to every thread while any thread holds a MemPool context open (pytorch/pytorch#175015):

1. ``process_events`` is skipped: ``cudaEventQuery`` is illegal during capture.
2. A block freed with uses on other streams (``record_stream``) cannot get events;
   it waits in ``deferred_blocks`` until the next ``process_events`` after capture.
   With ``graph_capture_record_stream_reuse:True`` it records the capture's terminal
   nodes as "free markers" and is freed *during* capture as soon as every later
   node provably comes after them (the graph's topology, no event query needed).
3. ``release_cached_blocks`` is not tried in the OOM ladder (it synchronizes), and
   ``empty_cache()`` leaves the default pools alone.  ``release_available_cached_blocks``
   has no such guard: it may ``cudaFree`` during a capture (pytorch/pytorch#159594).
4. ``cudaMalloc`` runs with the thread's capture mode exchanged to *relaxed* (only when the
   stream really captures: ``cudaMallocMaybeCapturing`` asks the capture status).
5. Uses recorded during capture (``block_to_cudagraph_stream_uses``) are dropped
   when the deferred free is finally processed: the capture ended, so the graph's
   work on those streams is complete.  After a ``use_mem_pool`` block nothing guarantees
   that: the block may be handed out while such a stream still reads it.
"""
from __future__ import annotations


def update_visited(terminals, visited: set) -> None:
    """``update_visited``: reverse DFS from the terminals, never re-walking a visited node."""
    todo = list(terminals)
    while todo:
        node = todo.pop()
        if node in visited:
            continue
        visited.add(node)
        todo.extend(node.parents)


def stream_get_capture_info(device, stream):
    """``cudaStreamGetCaptureInfo`` on ``stream``, or None on a device that cannot capture
    (protocol.CaptureDevice).  A plain function, not an allocator member: in PyTorch it is a
    CUDA runtime call, and only a simulated device may lack it."""
    info = getattr(device, "capture_info", None)
    return info(stream) if info is not None else None
