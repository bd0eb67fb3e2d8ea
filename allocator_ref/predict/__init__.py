"""Predict a model's GPU memory, allocator included, before running it (no GPU needed).

record.py    the program's allocations, recorded on ``meta`` tensors (needs torch; the CPU wheel is enough)
autocast.py  torch.autocast("cuda") on meta: autocast's CUDA cast policy per op and its weight-cast cache
caveats.py   what the recording cannot follow (an optimizer's unseen tensors, torch.compile, host reads),
             said with the bytes at stake; a blocking one turns "fits" into "cannot say"
distributed.py  one rank of a DDP job on PyTorch's fake process group (its buckets recorded)
unseen.py    what that recording cannot see (CUDA context, cuBLAS/cuBLASLt workspaces, NCCL ...), with sources
forecast.py  the recording replayed on the reference allocator for a chosen GPU: peaks, fit, stacks, sweep
sandbox.py   ``python -m allocator_ref predict SCRIPT``: the user's script in a bounded subprocess

    import allocator_ref.predict as P
    p = P.predict(step, profile="t4-16gb", batch_size=16)   # step(batch_size) builds with device="cuda"
    print(p.text())
"""
import importlib
import sys
import types

# public name -> module (imported on first use: the command line loads cli.py without the allocator)
_EXPORTS = {"Prediction": "forecast", "forecast": "forecast", "predict": "forecast", "replay_program": "forecast",
            "Unseen": "unseen", "cublas_workspace_bytes": "unseen", "record_program": "record"}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'allocator_ref.predict' has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
    except ImportError as exc:
        if "torch" not in str(exc):
            raise
        raise ImportError("allocator_ref.predict records on PyTorch's meta tensors: pip install torch "
                          "(the CPU wheel is enough)") from exc
    return getattr(module, name)


class _Package(types.ModuleType):
    """This package, keeping its public ``forecast`` function when the submodule of the same name loads.

    Python's import system binds every submodule it loads on its package
    (importlib._bootstrap ``_find_and_load_unlocked``: ``setattr(parent_module, child, module)``),
    so ``import allocator_ref.predict.forecast`` anywhere would turn ``allocator_ref.predict.forecast``
    from the function into the module.  That one binding is skipped: the module stays in
    ``sys.modules`` and ``from allocator_ref.predict.forecast import ...`` works as before."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = ["Prediction", "Unseen", "cublas_workspace_bytes", "forecast", "predict", "record_program",
           "replay_program"]
