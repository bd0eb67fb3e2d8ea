"""``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` for the reference allocator.

Mirrors ``at::cuda::CUDAGraph`` (``aten/src/ATen/cuda/CUDAGraph.cpp``:
``capture_begin``, ``capture_end``, ``replay``, ``reset``, ``pool``) and the
``torch.cuda.graph`` context manager of ``torch/cuda/graphs.py``, on the
simulated device's capture model (``device/sim/graphs.py``).

The allocator side of a capture:

* ``capture_begin(pool=None)``: the graph's pool id is ``pool`` (shared with
  other graphs, ``graph_pool_handle()`` or a ``MemPool.id``) or a fresh
  ``(n, 0)`` id of its own; ``beginAllocateToPool(id, filter)`` routes every
  request made on a stream that is part of *this* capture into the pool.
* ``capture_end()``: ``endAllocateToPool`` -- requests go to the default pools
  again, but the pool keeps its memory: the graph's addresses are baked in.
* ``reset()`` (or ``del graph``): ``releasePool``; once no graph or MemPool
  holds the pool, ``empty_cache()`` may give its free segments back.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Optional

from .pools import check_pool_id
from .private_pool import generate_mempool_id


class CUDAGraph:
    """A graph captured from the allocator's device (``torch.cuda.CUDAGraph``)."""

    def __init__(self, allocator: Any) -> None:
        if not hasattr(allocator.device, "begin_capture"):
            raise TypeError("CUDA graph capture needs a device that can capture (the simulated "
                            f"device does); {allocator.device!r} cannot")
        self.allocator = allocator
        self.device = allocator.device
        self.stream = None
        self.capture_id = 0
        self.mempool_id: Optional[tuple] = None
        self.graph = None
        self.exec = None
        self._holds_pool = False

    def capture_begin(self, stream: Any, pool: Optional[tuple] = None,
                      capture_error_mode: str = "global") -> None:
        """``CUDAGraph::capture_begin``: pick the pool, route the capture's requests, begin capturing."""
        if self.mempool_id is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph; "
                               "call reset() before capturing again")
        pool_id = check_pool_id(tuple(pool)) if pool is not None else generate_mempool_id(False)
        self.device.begin_capture(stream, capture_error_mode)
        self.stream = stream
        self.capture_id = self.device.capture_info(stream).capture_id
        device, capture_id = self.device, self.capture_id

        def in_this_capture(s: Any) -> bool:        # the filter CUDAGraph passes to beginAllocateToPool
            info = device.capture_info(s)
            return info.status == "active" and info.capture_id == capture_id
        try:
            self.allocator.begin_allocate_to_pool(pool_id, in_this_capture)
        except Exception:
            self.device.end_capture(stream)
            raise
        self.mempool_id = pool_id
        self._holds_pool = True

    def capture_end(self) -> None:
        """``CUDAGraph::capture_end``: end the capture, stop routing, instantiate."""
        if self.stream is None or self.exec is not None:
            raise RuntimeError("capture_end without a capture_begin")
        try:
            self.graph = self.device.end_capture(self.stream)
        finally:
            self.allocator.end_allocate_to_pool(self.mempool_id)
        self.exec = self.device.instantiate(self.graph)

    def replay(self, stream: Any = None) -> None:
        """``CUDAGraph::replay``: run the captured work again, at the captured addresses."""
        if self.exec is None:
            raise RuntimeError("replay() before capture_end(): capture a graph first")
        self.exec.launch(stream if stream is not None else self.stream)

    def pool(self) -> tuple:
        """``CUDAGraph::pool``: the id to pass as ``pool=`` so another capture shares this pool."""
        if self.mempool_id is None:
            raise RuntimeError("pool() before capture_begin(): the graph has no pool yet")
        return self.mempool_id

    def reset(self) -> None:
        """``CUDAGraph::reset`` (also the destructor): drop the graph, release the pool."""
        if self._holds_pool:
            self._holds_pool = False
            self.allocator.release_pool(self.mempool_id)
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
    a.empty_cache()                       # torch.cuda.graph.__enter__ does gc.collect + empty_cache
    if stream is None:
        stream = a.device.create_stream()
    cuda_graph.capture_begin(stream, pool=pool, capture_error_mode=capture_error_mode)
    try:
        yield stream
    finally:
        cuda_graph.capture_end()
