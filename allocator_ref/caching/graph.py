"""``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` for the reference allocator.

Mirrors ``at::cuda::CUDAGraph`` (``aten/src/ATen/cuda/CUDAGraph.cpp``:
``capture_begin``, ``capture_end``, ``replay``, ``reset``, ``pool``) and the
``torch.cuda.graph`` context manager of ``torch/cuda/graphs.py``, on the
simulated device's capture model (``device/sim/graphs.py``).

The allocator side of a capture, in PyTorch 2.11's order:

* ``capture_begin(pool=None)``: the graph's pool id is ``pool`` (shared with
  other graphs, ``graph_pool_handle()`` or a ``MemPool.id``) or a fresh
  ``(n, 0)`` id of its own; ``beginAllocateToPool(id, filter)`` comes *before*
  ``cudaStreamBeginCapture`` ("Addendum" in ``capture_begin``: so that a free on
  another thread never records an event into a capture that already began).
  From that moment ``captures_underway`` is not empty, with everything that
  changes (capture_rules.py).
* ``capture_end()``: ``cudaStreamEndCapture`` first, then ``endAllocateToPool``.
  In 2.11 a failing ``cudaStreamEndCapture`` (an invalidated capture) throws
  *before* ``endAllocateToPool``: the pool stays in ``captures_underway`` for the
  rest of the process (pytorch/pytorch#180395, April 2026, moved the check after it).
* ``reset()`` (or ``del graph``): ``releasePool`` -- but only after a capture
  that ended successfully (``capture_ended_``); a failed capture keeps its
  pool's reference forever (pytorch/pytorch#190348, after 2.11).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Optional

from .pools import check_pool_id
from .private_pool import generate_mempool_id


# torch.cuda.graph's capture_error_mode values (cudaStreamCaptureMode).
CAPTURE_MODES = ("global", "thread_local", "relaxed")


class CUDAGraph:
    """A graph captured from the allocator's device (``torch.cuda.CUDAGraph``)."""

    def __init__(self, allocator: Any) -> None:
        if not hasattr(allocator.device, "begin_capture"):
            raise TypeError("CUDA graph capture needs a device that can capture (the simulated "
                            f"device does); {allocator.device!r} cannot")
        self.allocator = allocator
        self.device = allocator.device
        self.stream = None
        self.capture_id = 0                 # capture_id_: 0 until cudaStreamBeginCapture succeeded
        self.mempool_id: Optional[tuple] = None
        self.capture_ended = False          # capture_ended_: set only by a successful capture_end
        self.graph = None
        self.exec = None

    def _allocate_filter(self, s: Any) -> bool:
        """``create_allocate_filter``: is ``s`` capturing into *this* graph's capture?  Read at
        each request, so before cudaStreamBeginCapture (capture_id_ still 0) it accepts nothing."""
        info = self.device.capture_info(s)
        return info.status == "active" and self.capture_id != 0 and info.capture_id == self.capture_id

    def capture_begin(self, stream: Any, pool: Optional[tuple] = None,
                      capture_error_mode: str = "global") -> None:
        """``CUDAGraph::capture_begin``: pick the pool, route to it, then begin capturing."""
        if self.exec is not None or self.mempool_id is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph. "
                               "To capture a new graph, create a new instance.")
        if capture_error_mode not in CAPTURE_MODES:     # (torch/csrc/cuda/Graph.cpp, before any state)
            raise ValueError(f"capture_error_mode must be one of {CAPTURE_MODES}, got {capture_error_mode!r}")
        if stream is self.device.default_stream:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. (However, after "
                               "capture, it's ok to replay them on the default stream.)")
        pool_id = check_pool_id(tuple(pool)) if pool is not None else generate_mempool_id(False)
        self.stream = stream
        # 2.11: beginAllocateToPool first (create_or_incref_pool + captures_underway) ...
        self.allocator.device_allocator.begin_allocate_to_pool(pool_id, self._allocate_filter)
        self.mempool_id = pool_id
        # ... then cudaStreamBeginCapture (AT_CUDA_CHECK): if it throws, nothing undoes the line above.
        try:
            self.device.begin_capture(stream, capture_error_mode)
        except Exception as err:
            err.add_note(f"PyTorch 2.11 leaves pool {pool_id} in captures_underway after this (capture_begin "
                         f"has no cleanup): undo it with allocator.end_allocate_to_pool({pool_id}) and "
                         f"allocator.release_pool({pool_id}) (torch._C._cuda_endAllocateToPool and "
                         "torch._C._cuda_releasePool in PyTorch)")
            raise
        self.capture_id = self.device.capture_info(stream).capture_id

    def capture_end(self) -> None:
        """``CUDAGraph::capture_end`` as 2.11 has it: end the capture, *then* stop routing."""
        if self.stream is None or self.exec is not None:
            raise RuntimeError("capture_end() called before capture_begin().")
        try:
            self.graph = self.device.end_capture(self.stream)      # AT_CUDA_CHECK(cudaStreamEndCapture)
        except Exception as err:
            err.add_note(f"PyTorch 2.11 throws here before endAllocateToPool: pool {self.mempool_id} stays in "
                         "captures_underway (no process_events, deferred frees, no full flush on OOM, "
                         f"empty_cache() skips the default pools) until allocator.end_allocate_to_pool({self.mempool_id}) "
                         "(torch._C._cuda_endAllocateToPool; graph.pool() refuses a capture that did not end); fixed after 2.11 by pytorch/pytorch#180395. reset() will not release "
                         "the pool either (capture_ended_ is false; pytorch/pytorch#190348).")
            raise
        self.allocator.device_allocator.end_allocate_to_pool(self.mempool_id)
        self.capture_ended = True
        self.exec = self.device.instantiate(self.graph)

    def replay(self, stream: Any = None) -> None:
        """``CUDAGraph::replay``: run the captured work again, at the captured addresses."""
        if not self.capture_ended:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        self.exec.launch(stream if stream is not None else self.stream)

    def pool(self) -> tuple:
        """``CUDAGraph::pool``: the id to pass as ``pool=`` so another capture shares this pool."""
        if not self.capture_ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self.mempool_id

    def reset(self) -> None:
        """``CUDAGraph::reset`` (also the destructor): release the pool if the capture ended."""
        if self.capture_ended:
            self.capture_ended = False
            self.allocator.device_allocator.release_pool(self.mempool_id)
        self.graph = self.exec = None

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:
            pass


@contextmanager
def graph(cuda_graph: CUDAGraph, pool: Optional[tuple] = None, stream: Any = None,
          capture_error_mode: str = "global"):
    """``torch.cuda.graph``: synchronize, empty the cache, capture on a side stream (yielded)."""
    a = cuda_graph.allocator
    a.device.synchronize()
    a.empty_cache()                       # torch.cuda.graph.__enter__: synchronize, empty_cache
    if stream is None:
        stream = a.device.create_stream()
    cuda_graph.capture_begin(stream, pool=pool, capture_error_mode=capture_error_mode)
    try:
        yield stream
    finally:
        cuda_graph.capture_end()          # __exit__ calls capture_end whatever the body did
