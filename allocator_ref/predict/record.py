"""Record what a PyTorch program would ask the CUDA caching allocator, without a GPU.

The program runs on ``meta`` tensors: shapes, dtypes and lifetimes are real,
no byte is stored, nothing is computed.  A ``TorchDispatchMode`` sees every ATen
op after autograd, so the forward, the backward (the autograd engine keeps the
mode) and the optimizer all pass through it.  Each output's storage is an
allocation the caching allocator would serve (``nbytes`` is what
``CUDACachingAllocator::malloc`` is asked for); a ``weakref.finalize`` on the
storage fires when its last reference dies, which is when PyTorch hands the
block back (``CUDACachingAllocator::free``).  This is how
``torch.distributed._tools.mem_tracker.MemTracker`` tracks storages
(``_WeakRefInfo.create_winfo``, ``_track``); it keeps a running total, this
keeps the ordered events with their Python stacks, in the ``device_traces``
shape of ``torch.cuda.memory._snapshot()``.

Why ``meta`` and not ``FakeTensorMode`` with a fake ``cuda`` device: on a CPU
build of PyTorch the autograd engine asks for the CUDA device guard of every
fake CUDA tensor and aborts the process ("PyTorch is not linked with support for
cuda devices").  ``CudaAsMeta`` turns ``device="cuda"``, ``.cuda()`` and
``.to("cuda")`` into ``meta`` so unchanged model code records too.

Where a meta run under a dispatch mode differs from the same program on a GPU, the
recorder puts the GPU's behaviour back, each case named where it is done:
the cuBLAS workspaces (one per thread, at its first GEMM), the operand copies a CUDA
GEMM makes of a matrix cuBLAS cannot read, autograd's in-place gradient sums (any
Python mode makes them out of place), optimizers' ``foreach`` path, and no
initialisation work on CPU tensors.  What stays unseen is listed in unseen.py.
"""
from __future__ import annotations

import os
import sys
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Optional

try:
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
except ImportError:        # the course installs and imports without torch; record_program then says so
    torch = None
    TorchFunctionMode = TorchDispatchMode = object

from ..provenance import mark_course_made
from . import autocast, caveats, distributed
from .unseen import PROFILE_ARCH, cublas_workspace_bytes
from .patching import patched

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# torch's own plumbing between the program and the mode (the dispatch and function modes, dynamo's
# disable wrapper): a real snapshot shows none of them.
_PLUMBING = tuple(os.sep + os.path.join("torch", *p.split("/")) for p in (
    "utils/_python_dispatch.py", "overrides.py", "_dynamo/eval_frame.py", "_compile.py", "_ops.py",
    "utils/_device.py"))

# ATen ops that call cuBLAS (at::cuda::blas::gemm / bgemm / gemv ...): the first one on a thread
# makes that thread's cuBLAS workspace (getCurrentCUDABlasHandle -> getNewWorkspace).
_GEMMS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_addmm_activation",
          "addr", "ger"}

# The GEMMs whose CUDA implementation copies an operand cuBLAS cannot read as it is
# (aten/src/ATen/native/cuda/Blas.cpp: prepare_matrix_for_cublas / prepare_batch_matrix_for_cublas
# clone a matrix whose strides are neither row- nor column-major, e.g. an expanded gradient):
# the copy is made after the output and freed before the op returns.
_OPERANDS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2), "_addmm_activation": (1, 2)}

# Out-of-place ops a backward formula uses, under a Python mode, instead of the in-place one it
# runs on a plain CUDA tensor, on a buffer of zeros it has just made (_FRESH_BUFFERS).
_FILLS_FRESH_BUFFER = {"aten::scatter_add", "aten::scatter.src", "aten::scatter.value", "aten::index_put",
                       "aten::index_add"}
_FRESH_BUFFERS = {"aten::new_zeros", "aten::zeros_like", "aten::zeros"}

BASE_ADDRESS = 0x7F0000000000      # where the recorder's made-up addresses start (they only pair frees)


def _is_cuda(device) -> bool:
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return isinstance(device, torch.device) and device.type == "cuda"


class CudaAsMeta(TorchFunctionMode):
    """``device="cuda"``, ``tensor.cuda()`` and ``.to("cuda")`` become ``meta`` (model code runs unchanged)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to("meta", non_blocking=kwargs.get("non_blocking", False))
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "meta"
        if func is torch.Tensor.to:
            args = tuple("meta" if _is_cuda(a) else a for a in args)
        half_to_float = _half_to_float(func, args, kwargs)
        if half_to_float is not None:
            return half_to_float
        return func(*args, **kwargs)


def _half_to_float(func, args, kwargs):
    """``softmax`` / ``log_softmax`` of a float16 CUDA tensor with ``dtype=torch.float32`` run one
    kernel that reads halves and writes floats (SoftMax.cpp ``softmax``: ``input_.is_cuda() &&
    Half && dtype == Float`` -> ``_softmax(input_, dim_, true)``); on meta the same call makes a
    float32 copy first.  Take the CUDA path: no copy.  bfloat16 has no such path on CUDA either."""
    name = getattr(func, "__name__", "")
    if name not in ("softmax", "log_softmax") or not args or kwargs.get("dtype") is not torch.float32:
        return None
    x = args[0]
    if not (isinstance(x, torch.Tensor) and x.device.type == "meta" and x.dtype == torch.float16):
        return None
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if not isinstance(dim, int) or set(kwargs) - {"dim", "dtype"}:
        return None
    kernel = torch._softmax if name == "softmax" else torch._log_softmax
    return kernel(x, dim, True)


def _stack(limit: int = 48) -> list[dict]:
    """The Python stack as a snapshot's ``frames`` (innermost first), without this package and
    torch's mode plumbing: what ``torch.cuda.memory._record_memory_history(stacks="python")`` keeps."""
    frames = []
    frame = sys._getframe(2)
    while frame is not None and len(frames) < limit:
        name = frame.f_code.co_filename
        child_main = name == "<string>" and frame.f_back is None       # sandbox.py's `python -c` line
        if not name.startswith(_HERE) and not name.endswith(_PLUMBING) and not name.startswith("<frozen") \
                and not child_main:
            frames.append({"filename": name, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


def _cublas_ready(t: torch.Tensor) -> bool:
    """``prepare_(batch_)matrix_for_cublas``: can cuBLAS read the last two dims as they are
    (row-major or column-major with a leading dimension at least the row length)?"""
    if t.dim() == 2 and (t.is_contiguous() or t.t().is_contiguous()):
        return True                  # prepare_matrix_for_cublas's common case: any dense layout serves
    rows, cols = t.shape[-2], t.shape[-1]
    s_rows, s_cols = t.stride()[-2], t.stride()[-1]
    if (s_cols == 1 or cols == 1) and s_rows >= max(1, cols):
        return True
    return (s_rows == 1 or rows == 1) and s_cols >= max(1, rows)


class AllocationRecorder(TorchDispatchMode):
    """Every ``meta`` storage's birth and death, in program order, as snapshot trace entries."""

    def __init__(self, workspace_bytes: int = 0, stacks: bool = True) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.workspace_bytes = workspace_bytes
        self.stacks = stacks
        self.marks: list[int] = []
        self.windows: list[dict] = []                # _record_memory_history start/stop (event indices)
        self.empty_caches: list[int] = []            # event indices where the script called empty_cache()
        self.casts = 0                               # autocast casts recorded (_to_copy inside a region)
        self._fresh: set = set()                      # zero buffers a backward formula just made
        self._op = ""
        self.workspaces: dict[str, int] = {}        # "forward"/"backward" -> address (kept to the end)
        self._live: dict[int, tuple[int, int]] = {}  # StorageImpl pointer -> (address, size)
        self._next = BASE_ADDRESS
        self._t0 = time.perf_counter()

    # ---- events
    def _time_us(self) -> int:
        return int((time.perf_counter() - self._t0) * 1e6)

    def _alloc(self, size: int, frames: Optional[list]) -> int:
        if self._op:
            # the ATen operator, as a C++ frame of a stacks="all" snapshot names the kernel (kept even
            # without Python stacks: the report finds the cuBLAS workspaces by it)
            frames = [{"filename": "??", "line": 0, "name": self._op}] + (frames or [])
        addr = self._next
        self._next += max(512, -(-size // 512) * 512)
        entry = {"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": self._time_us()}
        if frames is not None:
            entry["frames"] = frames
        self.events.append(entry)
        return addr

    def _free(self, key: int) -> None:
        self._fresh.discard(key)                  # its StorageImpl address may be reused by a later storage
        addr, size = self._live.pop(key, (None, 0))
        if addr is None:
            return
        now = self._time_us()
        # PyTorch records free_requested when the tensor dies and free_completed when its stream's
        # work is done; on one stream with no record_stream both come at once.
        for action in ("free_requested", "free_completed"):
            self.events.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": now})

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key, size = st._cdata, st.nbytes()
        seen = self._live.get(key)
        if seen is not None:
            if size > seen[1]:            # resize_ / an out= op grew it: a new block, the old one freed
                self._free(key)
                self._live[key] = (self._alloc(size, _stack() if self.stacks else None), size)
            return
        if size == 0:                      # CUDACachingAllocator returns nullptr for 0 bytes, records nothing
            return
        self._live[key] = (self._alloc(size, _stack() if self.stacks else None), size)
        weakref.finalize(st, self._free, key)

    def _workspace(self) -> None:
        """The cuBLAS workspace of this thread, at its first GEMM (CublasHandlePool.cpp getNewWorkspace)."""
        thread = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
        if self.workspace_bytes and thread not in self.workspaces:
            frames = _stack() if self.stacks else None
            self._op = "at::cuda::getCurrentCUDABlasHandle()"
            self.workspaces[thread] = self._alloc(self.workspace_bytes, frames)

    def _operand_copies(self, name: str, args) -> list[tuple[int, int]]:
        """(address, size) of the operand copies the CUDA GEMM would make (see _OPERANDS), allocated now."""
        copies = []
        for i in _OPERANDS.get(name, ()):
            t = args[i] if i < len(args) else None
            if isinstance(t, torch.Tensor) and t.device.type == "meta" and t.dim() in (2, 3) and not _cublas_ready(t):
                size = t.numel() * t.element_size()
                if size:
                    copies.append((self._alloc(size, _stack() if self.stacks else None), size))
        return copies

    def _free_copies(self, copies: list[tuple[int, int]]) -> None:
        for addr, size in copies:
            for action in ("free_requested", "free_completed"):
                self.events.append({"action": action, "addr": addr, "size": size, "stream": 0,
                                    "time_us": self._time_us()})

    def _accumulates_in_place(self, op: str, args, kwargs, out) -> bool:
        """Autograd's InputBuffer::accumulate adds a second gradient INTO the first (``add_``, no new
        block) when it holds the last reference to a dense first one; under any Python dispatch mode
        it adds out of place instead (``isTensorSubclassLike`` is true while a mode is on), so the
        recording would show a block the real run never makes.  Put it back: the sum takes over the
        first gradient's block."""
        if torch.is_grad_enabled() or torch._C._current_graph_task_id() == -1 or not args:
            return False
        first = args[0]
        if op in _FILLS_FRESH_BUFFER:
            # The same switch inside backward formulas (gather_backward, value_selecting_reduction_backward
            # ...: ``areAnyTensorSubclassLike`` picks scatter/scatter_add over scatter_/scatter_add_):
            # the real run writes into the zeros it just made.
            if not (isinstance(first, torch.Tensor) and first.untyped_storage()._cdata in self._fresh):
                return False
        elif op != "aten::add.Tensor" or kwargs or len(args) != 2:
            return False
        if not (isinstance(first, torch.Tensor) and isinstance(out, torch.Tensor) and first.device.type == "meta"
                and first.shape == out.shape and first.dtype == out.dtype and first.is_contiguous()):
            return False
        old = first.untyped_storage()._cdata
        if old not in self._live or out.untyped_storage().nbytes() != self._live[old][1]:
            return False
        # can_accumulate_inplace asks "storage().use_count() == 1"; here the call into this mode holds
        # one more reference than the engine's buffer, so 2 means "only the gradient itself"
        if op == "aten::add.Tensor" and torch._C._storage_Use_Count(old) > 2:
            return False
        st = out.untyped_storage()
        self._fresh.discard(old)
        self._live[st._cdata] = self._live.pop(old)          # the first gradient's block, now holding the sum
        weakref.finalize(st, self._free, st._cdata)
        return True

    # ---- the mode
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return _no_value(args[0])
        out = func(*args, **(kwargs or {}))
        op = func.name()
        if op == "aten::_to_copy" and autocast.casting():
            self.casts += 1
        if self._accumulates_in_place(op, args, kwargs, out):
            return out
        self._op = op                   # named as the innermost frame of what it allocates
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "meta":
                self._track(t)
        if op in _FRESH_BUFFERS and isinstance(out, torch.Tensor) and torch._C._current_graph_task_id() != -1:
            self._fresh.add(out.untyped_storage()._cdata)
        name = func._overloadpacket.__name__
        if name in _GEMMS:
            copies = self._operand_copies(name, args)
            self._workspace()        # after the output: at::empty runs before the gemm asks for its handle
            self._free_copies(copies)
        return out


def _no_value(t: "torch.Tensor"):
    """``loss.item()`` / ``bool(t)`` on meta: there is no value; 0 stands in, and the report says so."""
    watch = caveats.current()
    if watch is not None:
        watch.host_read()
    return False if t.dtype == torch.bool else (0 if not (t.is_floating_point() or t.is_complex()) else 0.0)


_ACTIVE: list = []          # the recorder of the record_program call running now (for mark())


def mark() -> int:
    """Note "here" in the recording (e.g. where a real run started its memory history); returns the
    index of the next event.  The snapshot lists the marks under ``predict_marks``."""
    if not _ACTIVE:
        raise RuntimeError("mark() is for code running inside record_program / predict")
    _ACTIVE[-1].marks.append(len(_ACTIVE[-1].events))
    return _ACTIVE[-1].marks[-1]


@contextmanager
def _foreach_on_meta():
    """Optimizers pick ``foreach`` kernels by device (``_default_to_fused_or_foreach``): on CUDA
    they do, on ``meta`` they would not; count ``meta`` as CUDA so the same kernels (and the
    same temporary lists of tensors) are recorded."""
    import torch.optim.optimizer as optimizer
    original = optimizer._get_foreach_kernels_supported_devices
    optimizer._get_foreach_kernels_supported_devices = lambda: [*original(), "meta"]
    try:
        yield
    finally:
        optimizer._get_foreach_kernels_supported_devices = original


def _empty_cache(*args, **kwargs) -> None:
    """``torch.cuda.empty_cache()``: noted at this point of the recording; the replay hands the
    cached, unused segments back there (CUDACachingAllocator.cpp ``emptyCache`` -> release_cached_blocks)."""
    if _ACTIVE:
        _ACTIVE[-1].empty_caches.append(len(_ACTIVE[-1].events))


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """``torch.cuda.memory._record_memory_history``: a real run's snapshot holds only what happened
    between its start and its stop (or its dump), so the prediction reports that window too."""
    if not _ACTIVE:
        return
    recorder = _ACTIVE[-1]
    open_window = recorder.windows and recorder.windows[-1]["stop"] is None
    if enabled in (None, False) and open_window:
        recorder.windows[-1]["stop"] = len(recorder.events)
    elif enabled not in (None, False) and not open_window:
        recorder.windows.append({"start": len(recorder.events), "stop": None})


@contextmanager
def _memory_calls():
    """The torch.cuda memory calls that shape a recording: empty_cache, the memory-history window,
    and the ones with no effect on it (reset_peak_memory_stats, _dump_snapshot) as no-ops."""
    import torch.cuda as cuda
    import torch.cuda.memory as memory
    patches = [(cuda, "empty_cache", _empty_cache), (memory, "empty_cache", _empty_cache),
               (memory, "_record_memory_history", _record_memory_history),
               (cuda, "reset_peak_memory_stats", lambda *a, **k: None),
               (memory, "reset_peak_memory_stats", lambda *a, **k: None),
               (memory, "_dump_snapshot", lambda *a, **k: None)]
    with patched(patches):
        yield


@contextmanager
def script_stand_ins(profile: str = "h100-80gb"):
    """Everything a GPU script needs to run unchanged on meta (also while it is imported)."""
    with caveats.stand_ins(PROFILE_ARCH.get(profile, 9)), _memory_calls(), autocast.stand_ins(), \
            distributed.one_rank():
        yield


# torch.nn.init's in-place initializers: on a CPU tensor their values never reach the GPU's
# memory (the tensor is copied to the device later, whatever it holds), and computing them
# for hundreds of millions of parameters takes minutes; on a meta tensor they still run.
_INITIALIZERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
                 "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
                 "sparse_")


@contextmanager
def _skip_cpu_initialization():
    import torch.nn.init as init
    originals = {name: getattr(init, name) for name in _INITIALIZERS if hasattr(init, name)}

    def skipping(original):
        def initializer(tensor, *args, **kwargs):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                return tensor
            return original(tensor, *args, **kwargs)
        return initializer

    for name, original in originals.items():
        setattr(init, name, skipping(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(init, name, original)


def record_program(step_fn: Callable[..., Any], *args, profile: str = "h100-80gb",
                   cublas_workspace: Optional[int] = None, stacks: bool = True,
                   allocator_conf: str = "", **kwargs) -> dict:
    """Run ``step_fn(*args, **kwargs)`` on ``meta`` tensors and return its allocations as a snapshot dict.

    The dict is PyTorch's ``_dump_snapshot()`` shape with no segments (no allocator ran yet):
    ``device_traces[0]`` holds ``alloc`` / ``free_requested`` / ``free_completed`` entries with
    sizes, stream 0 and Python ``frames``.  ``cublas_workspace`` (bytes) defaults to the size
    PyTorch picks for ``profile``'s GPU; 0 leaves the workspaces out.  Storages still alive when
    ``step_fn`` returns are freed at the end only if the caller drops them (they stay live).
    """
    if torch is None:
        raise ImportError("record_program runs the step on PyTorch's meta tensors: pip install torch "
                          "(the CPU wheel is enough)")
    if cublas_workspace is None:
        cublas_workspace = cublas_workspace_bytes(profile)
    recorder = AllocationRecorder(cublas_workspace, stacks)
    _ACTIVE.append(recorder)
    try:
        with caveats.watching() as watch, caveats.keeping_parameters(), _foreach_on_meta(), \
                _skip_cpu_initialization(), script_stand_ins(profile), CudaAsMeta(), recorder:
            result = step_fn(*args, **kwargs)
            del result                     # what the step returns dies here, inside the recording
    finally:
        _ACTIVE.pop()
    events = list(recorder.events)
    windows = [{"start": w["start"], "stop": len(events) if w["stop"] is None else w["stop"]}
               for w in recorder.windows]
    return mark_course_made({              # the course recorded it, not PyTorch (provenance.py)
        "segments": [],
        "device_traces": [events],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": allocator_conf},
        "external_annotations": [],
        "predict_marks": list(recorder.marks),
        "predict_windows": windows,
        "predict_empty_cache": list(recorder.empty_caches),
        "predict_caveats": watch.finish(),
        "predict_autocast_casts": recorder.casts,
        "recorded_with": (f"allocator_ref.predict on torch {torch.__version__}: meta tensors on the CPU, "
                          f"cuBLAS workspace {cublas_workspace:,} B per thread"),
    })


