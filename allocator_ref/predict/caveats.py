"""What a meta recording cannot follow, caught while it runs and said with the bytes at stake.

A recording on ``meta`` tensors is exact only for what it sees.  The cases below are the
ones real training scripts hit; each is a ``Caveat`` in the recorded program, and a
*blocking* one means the prediction cannot say "fits" (forecast.py then says why instead).

* An optimizer stepping tensors that are not on the (simulated) GPU: its state (Adam's
  ``exp_avg`` / ``exp_avg_sq``) would be made on the GPU in the real run, here it is not.
  Blocking; the bytes at stake are those tensors' sizes times the optimizer's state per
  parameter.
* ``torch.compile`` / ``Module.compile``: recorded as eager (what the compiled code runs
  unfused).  Inductor's fusion keeps fewer intermediates; ``mode="reduce-overhead"`` or
  ``"max-autotune"`` adds CUDA-graph pools and autotuning buffers that no eager run makes.
  Blocking for those two modes, a note otherwise.
* A value read back on the host (``loss.item()``, ``if t.any():``): a meta tensor has no
  value, the recording hands back 0; control flow that depends on it may differ.  A note.
* A ``torch.cuda`` call with no answer without a GPU (``memory_allocated()``,
  ``get_device_properties()`` ...): refused with a line that names it (``NoAnswer``), never
  a made-up number.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

from ..editions.messages import translator
from .patching import patched

tr = translator("doctor")

# Tensors of optimizer state per parameter element, by class name (torch/optim/*.py, _init_group):
# Adam/AdamW keep exp_avg and exp_avg_sq (plus max_exp_avg_sq with amsgrad), SGD with momentum
# one momentum_buffer, RMSprop square_avg, Adagrad sum.  Unknown optimizers count 0 (said "at least").
STATE_PER_PARAMETER = {"Adam": 2, "AdamW": 2, "NAdam": 2, "RAdam": 2, "Adamax": 2, "SGD": 1, "RMSprop": 1,
                       "Adagrad": 1, "Adadelta": 2}

# torch.cuda functions whose answer would come from a real allocator or device (torch/cuda/memory.py,
# torch/cuda/__init__.py): the recording has neither, so it refuses them by name.
NO_ANSWER = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
             "memory_stats", "memory_summary", "mem_get_info", "get_device_properties", "get_device_name",
             "get_device_capability", "utilization", "memory_snapshot")


class NoAnswer(RuntimeError):
    """A torch.cuda question the recording cannot answer (it runs no allocator and has no GPU)."""


@dataclass
class Caveat:
    """One thing the recording could not follow: ``kind``, the bytes at stake (None: unknown),
    whether it rules out a "fits", and where in the script it happened."""
    kind: str
    nbytes: int | None
    blocking: bool
    where: str = ""
    detail: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def user_line() -> str:
    """'file:line' of the innermost frame outside torch and this package."""
    import os
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((here, torch_dir, "<frozen")):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class Watch:
    """The caveats of one recording (record_program opens one; script-level calls go to the last one)."""

    def __init__(self) -> None:
        self.caveats: list[Caveat] = []
        self.host_reads = 0
        self.host_read_where = ""

    def optimizer_step(self, optimizer, args, kwargs) -> None:
        """register_optimizer_step_pre_hook: every parameter an optimizer steps must be on meta (the GPU)."""
        off = [p for group in optimizer.param_groups for p in group["params"]
               if isinstance(p, torch.Tensor) and p.device.type != "meta" and p.grad is not None]
        if not off:
            return
        name = type(optimizer).__name__
        size = sum(p.numel() * p.element_size() for p in off)
        per = STATE_PER_PARAMETER.get(name, 0)
        detail = tr("{n} {device} tensor(s) of {name}", n=len(off), device=off[0].device.type, name=name)
        if not any(c.kind == "optimizer-unseen" for c in self.caveats):
            self.caveats.append(Caveat("optimizer-unseen", size * per if per else None, True, user_line(), detail))

    def compiled(self, mode) -> None:
        blocking = mode in ("reduce-overhead", "max-autotune")
        self.caveats.append(Caveat("compile", None, blocking, user_line(), f"mode={mode or 'default'}"))

    def host_read(self) -> None:
        if not self.host_reads:
            self.host_read_where = user_line()
        self.host_reads += 1

    def finish(self) -> list[dict]:
        if self.host_reads:
            self.caveats.append(Caveat("host-read", None, False, self.host_read_where, str(self.host_reads)))
        return [c.to_json() for c in self.caveats]


_WATCHES: list[Watch] = []
_COMPILED_AT_IMPORT: list[str] = []      # torch.compile calls made while the script was imported


def current() -> Watch | None:
    return _WATCHES[-1] if _WATCHES else None


@contextmanager
def keeping_parameters():
    """``model.to("cuda")`` keeps each Parameter object, as on a GPU.

    Module._apply (torch/nn/modules/module.py) sets ``param.data = cuda_tensor`` when
    ``torch._has_compatible_shallow_copy_type`` says CPU and CUDA storages are interchangeable
    (they are), so an optimizer built before ``.to()`` holds the very tensors that move.
    CPU and meta are not interchangeable: there it would make NEW Parameters and the optimizer
    would step the stale CPU ones.  ``swap_module_params_on_conversion`` (the same _apply,
    ``torch.utils.swap_tensors``) keeps the objects instead: the same identity as on a GPU.
    """
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


@contextmanager
def watching():
    """Open a Watch for one recording: optimizer steps checked, compile calls from import time kept."""
    watch = Watch()
    for mode in _COMPILED_AT_IMPORT:
        watch.caveats.append(Caveat("compile", None, mode in ("reduce-overhead", "max-autotune"),
                                    "import", f"mode={mode or 'default'}"))
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    handle = register_optimizer_step_pre_hook(watch.optimizer_step)
    _WATCHES.append(watch)
    try:
        yield watch
    finally:
        _WATCHES.pop()
        handle.remove()


def _compile_stand_in(original):
    def compile(model=None, *args, mode=None, **kwargs):
        """torch.compile as eager: the function or module itself (its parameters stay the same objects)."""
        watch = current()
        if watch is not None:
            watch.compiled(mode)
        else:
            _COMPILED_AT_IMPORT.append(mode)
        if model is None:                      # @torch.compile(mode=...) used as a decorator factory
            return lambda fn: fn
        return model
    compile.__wrapped__ = original
    return compile


def _module_compile(self, *args, mode=None, **kwargs) -> None:
    """``model.compile()`` (nn.Module.compile compiles in place and returns None): eager, noted."""
    _compile_stand_in(None)(self, mode=mode)


def _no_answer(name: str):
    def refuse(*args, **kwargs):
        raise NoAnswer(tr("predict cannot answer torch.cuda.{name}() while recording: meta tensors run no "
                          "allocator on no GPU; take it out of the step (the prediction reports the peaks)",
                          name=name))
    return refuse


def _bf16_stand_in(major: int):
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        """torch/cuda/__init__.py is_bf16_supported for the profile's GPU: compute capability 8 or
        more, or (including_emulation) any GPU that can make a bfloat16 tensor, which all CUDA ones can."""
        return major >= 8 or bool(including_emulation)
    return is_bf16_supported


@contextmanager
def stand_ins(major: int = 9):
    """torch.compile, Module.compile and the torch.cuda calls a GPU script makes, while the script runs.

    A script picks its device with ``torch.cuda.is_available()``: predict answers as the GPU it
    predicts for (True, one device, device 0, bfloat16 as the profile's compute capability ``major``).  Calls that only wait (``synchronize``) do nothing.
    Calls whose answer needs a real allocator are refused by name (NO_ANSWER), not made up.
    """
    import torch.cuda as cuda
    patches = [(torch, "compile", _compile_stand_in(torch.compile)),
               (torch.nn.Module, "compile", _module_compile),
               (cuda, "is_available", lambda: True), (cuda, "device_count", lambda: 1),
               (cuda, "current_device", lambda: 0), (cuda, "set_device", lambda *a, **k: None),
               (cuda, "synchronize", lambda *a, **k: None), (cuda, "is_bf16_supported", _bf16_stand_in(major))]
    patches += [(cuda, name, _no_answer(name)) for name in NO_ANSWER if hasattr(cuda, name)]
    with patched(patches):
        yield
