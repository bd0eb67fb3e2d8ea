"""CUDA graph capture on the simulated device: cudaStreamBeginCapture ... cudaGraphLaunch.

What the caching allocator must respect while a graph is captured, modelled the
way the CUDA Programming Guide ("CUDA Graphs", "Stream Capture", "Prohibited and
Unhandled Operations", "Cross-stream Dependencies and Events") describes it:

* Work queued on a capturing stream is *recorded*, not run: each kernel becomes a
  node whose parents are the stream's current terminal nodes.
* A stream joins a capture by waiting on an event recorded in it (a fork); the
  capture can only end once every joined stream was joined back into the origin
  stream (``cudaErrorStreamCaptureUnjoined`` otherwise).
* While a capture in ``global`` mode is underway (``thread_local``: in the
  capturing thread), "potentially unsafe" calls fail with
  ``cudaErrorStreamCaptureUnsupported`` and invalidate the capture: querying or
  synchronizing an event, a stream or the device, ``cudaMalloc`` and ``cudaFree``
  -- unless the calling thread switched itself to ``relaxed`` mode
  (``cudaThreadExchangeStreamCaptureMode``, PyTorch's ``CUDAStreamCaptureModeGuard``).
  A cudaMalloc in relaxed mode really allocates (new addresses for the graph)
  and is not part of the graph: replays do not allocate again.
* ``cudaStreamGetCaptureInfo`` gives (status, capture id, graph, terminal nodes):
  what PyTorch's ``stream_get_capture_info`` reads to decide, from the graph's
  topology alone, when a block freed during capture may be reused.
* A graph is replayed with :meth:`GraphExec.launch`: its kernels run again on the
  given stream, at the addresses baked in at capture time.
"""
from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import cuda_error

CAPTURE_MODES = ("global", "thread_local", "relaxed")
_capture_ids = itertools.count(1)


@dataclass(eq=False)
class GraphNode:
    """One captured operation (``cudaGraphNode_t``): a kernel, or an empty marker."""

    kind: str                               # "kernel" or "empty"
    parents: list = field(default_factory=list)
    duration_us: float = 0.0
    effect: Optional[Callable[[], None]] = None


class Graph:
    """A captured ``cudaGraph_t``: nodes in the order they were captured."""

    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []

    def add(self, node: GraphNode) -> GraphNode:
        self.nodes.append(node)
        return node

    def __repr__(self) -> str:
        return f"<Graph {len(self.nodes)} nodes (simulated)>"


class Capture:
    """One capture underway: its graph, mode, thread and each joined stream's terminal nodes."""

    def __init__(self, origin, mode: str) -> None:
        self.id = next(_capture_ids)
        self.graph = Graph()
        self.origin = origin
        self.mode = mode
        self.thread = threading.get_ident()
        self.terminals: dict[int, list[GraphNode]] = {origin.handle: []}    # stream handle -> nodes
        self.invalidated: Optional[str] = None


@dataclass
class CaptureInfo:
    """``cudaStreamGetCaptureInfo``'s answer."""

    status: str                    # "none", "active" or "invalidated"
    capture_id: int = 0
    graph: Optional[Graph] = None
    terminals: tuple = ()


class GraphExec:
    """An instantiated graph (``cudaGraphExec_t``); :meth:`launch` replays it on a stream."""

    def __init__(self, device, graph: Graph) -> None:
        self.device = device
        self.graph = graph

    def launch(self, stream=None) -> None:
        """cudaGraphLaunch: every kernel node runs again, in capture order, on ``stream``."""
        self.device._check_capture_safe("cudaGraphLaunch", stream)
        for node in self.graph.nodes:
            if node.kind == "kernel":
                self.device._launch(stream, node.duration_us, node.effect)


class GraphCalls:
    """The capture calls, mixed into SimDevice."""

    def _init_graphs(self) -> None:
        self._captures: dict[int, Capture] = {}          # stream handle -> the capture it is part of
        self._capture_modes: dict[int, str] = {}         # thread id -> exchanged mode (a dict, so the
                                                         # device can be deep-copied by the replay's trials)

    # ------------------------------------------------------------- begin / end
    def begin_capture(self, stream, mode: str = "global") -> None:
        """cudaStreamBeginCapture(stream, mode)."""
        s = self._check_stream(stream)
        if mode not in CAPTURE_MODES:
            raise cuda_error("cudaErrorInvalidValue", f"capture mode must be one of {CAPTURE_MODES}, got {mode!r}")
        if s is self.default_stream:
            raise cuda_error("cudaErrorStreamCaptureUnsupported",
                             "the legacy default stream cannot be captured; capture on a stream of your own "
                             "(device.create_stream())")
        if s.handle in self._captures:
            raise cuda_error("cudaErrorIllegalState", f"stream {s.handle:#x} is already capturing")
        self._captures[s.handle] = Capture(s, mode)

    def end_capture(self, stream) -> Graph:
        """cudaStreamEndCapture: the graph, once every forked stream was joined back."""
        s = self._check_stream(stream)
        cap = self._captures.get(s.handle)
        if cap is None or cap.origin is not s:
            raise cuda_error("cudaErrorIllegalState", f"stream {s.handle:#x} is not the origin of a capture")
        handles = [h for h, c in self._captures.items() if c is cap]
        reached = ancestors(cap.terminals[s.handle])
        unjoined = [h for h in handles if h != s.handle
                    and not all(n in reached for n in cap.terminals[h])]
        for h in handles:
            del self._captures[h]
        if cap.invalidated:
            raise cuda_error("cudaErrorStreamCaptureInvalidated",
                             f"the capture was invalidated by {cap.invalidated}")
        if unjoined:
            raise cuda_error("cudaErrorStreamCaptureUnjoined",
                             f"streams {[hex(h) for h in unjoined]} were forked into the capture and never "
                             "joined back (make the capturing stream wait on an event recorded on them)")
        return cap.graph

    def instantiate(self, graph: Graph) -> GraphExec:
        """cudaGraphInstantiate."""
        if not isinstance(graph, Graph):
            raise cuda_error("cudaErrorInvalidValue", f"instantiate expects a Graph from end_capture, got {graph!r}")
        return GraphExec(self, graph)

    def capture_info(self, stream) -> CaptureInfo:
        """cudaStreamGetCaptureInfo(stream)."""
        s = self._check_stream(stream)
        cap = self._captures.get(s.handle)
        if cap is None:
            return CaptureInfo("none")
        if cap.invalidated:
            return CaptureInfo("invalidated", cap.id, cap.graph)
        return CaptureInfo("active", cap.id, cap.graph, tuple(cap.terminals[s.handle]))

    def is_capturing(self, stream=None) -> bool:
        """cudaStreamIsCapturing (any stream when ``stream`` is None)."""
        if stream is None:
            return bool(self._captures)
        return self._check_stream(stream).handle in self._captures

    # ----------------------------------------------------- the relaxed guard
    @contextmanager
    def capture_mode(self, mode: str):
        """cudaThreadExchangeStreamCaptureMode for this thread (``CUDAStreamCaptureModeGuard``)."""
        if mode not in CAPTURE_MODES:
            raise cuda_error("cudaErrorInvalidValue", f"capture mode must be one of {CAPTURE_MODES}, got {mode!r}")
        me = threading.get_ident()
        old = self._capture_modes.get(me, "global")
        self._capture_modes[me] = mode
        try:
            yield
        finally:
            self._capture_modes[me] = old

    def _check_capture_safe(self, call: str, stream=None) -> None:
        """Refuse a potentially unsafe call while a capture that forbids it is underway."""
        me = threading.get_ident()
        if not self._captures or self._capture_modes.get(me, "global") == "relaxed":
            return
        for cap in set(self._captures.values()):
            if cap.mode == "global" or (cap.mode == "thread_local" and cap.thread == me):
                cap.invalidated = cap.invalidated or call
                raise cuda_error("cudaErrorStreamCaptureUnsupported",
                                 f"{call} is not permitted while a stream is capturing a CUDA graph "
                                 f"({cap.mode} mode); the capture is now invalidated")

    # ------------------------------------------------ hooks for kernels/events
    def _capture_kernel(self, stream, duration_us: float, effect) -> bool:
        """Called by _launch: record the kernel if ``stream`` is capturing (True), else False."""
        cap = self._captures.get(stream.handle)
        if cap is None:
            return False
        node = cap.graph.add(GraphNode("kernel", list(cap.terminals[stream.handle]), duration_us, effect))
        cap.terminals[stream.handle] = [node]
        return True

    def _capture_event_record(self, event, stream) -> bool:
        """cudaEventRecord on a capturing stream remembers the stream's terminals (for a fork/join)."""
        cap = self._captures.get(stream.handle)
        event.captured = (cap, list(cap.terminals[stream.handle])) if cap is not None else None
        return cap is not None

    def _capture_wait_event(self, stream, event) -> bool:
        """cudaStreamWaitEvent on an event recorded in a capture: ``stream`` joins it (fork or join)."""
        captured = getattr(event, "captured", None)
        if captured is None:
            return False
        cap, nodes = captured
        joined = self._captures.get(stream.handle)
        if joined is not None and joined is not cap:
            raise cuda_error("cudaErrorStreamCaptureIsolation",
                             "a stream cannot join two different captures")
        current = cap.terminals.get(stream.handle, []) if joined is cap else []
        self._captures[stream.handle] = cap
        cap.terminals[stream.handle] = current + [n for n in nodes if n not in current]
        return True

    def add_empty_node(self, stream) -> GraphNode:
        """cudaStreamAddCaptureDependencies-style marker: an empty node after the stream's terminals."""
        cap = self._captures.get(self._check_stream(stream).handle)
        if cap is None:
            raise cuda_error("cudaErrorIllegalState", "add_empty_node: the stream is not capturing")
        node = cap.graph.add(GraphNode("empty", list(cap.terminals[stream.handle])))
        cap.terminals[stream.handle] = [node]
        return node


def ancestors(nodes) -> set:
    """Every node reachable backwards from ``nodes``, themselves included (a reverse DFS)."""
    seen, todo = set(), list(nodes)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo.extend(node.parents)
    return seen
